/* A float32 sum all-reduce through libbaton's C API, one process per rank.
 *
 * Environment: BATON_SOCKET (the node's batond; unset: baton_default_socket_path()),
 * BATON_COMM_ID (from `baton comm-id`, the same for every rank), BATON_RANK, BATON_WORLD_SIZE,
 * and optionally BATON_COUNT (elements, default 1048576).
 *
 * Rank r contributes (r + 1) * (i % 1000 + 1) at index i, so every element of the result must be
 * world_size * (world_size + 1) / 2 * (i % 1000 + 1) (integers below 2^24, so exact in float32,
 * for up to 180 ranks). Exits non-zero with libbaton's message on any failure. */
#include <baton/baton.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The integer in environment variable `name`, or `fallback` if unset; -1 if it is malformed. */
static long env_long(const char* name, long fallback) {
  const char* text = getenv(name);
  if (text == NULL || *text == '\0') return fallback;
  char* end = NULL;
  errno = 0;
  const long value = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < 0 || value > INT_MAX) return -1;
  return value;
}

/* Prints what failed with libbaton's message and returns 1, the exit code. */
static int fail(const char* what, baton_code_t code) {
  fprintf(stderr, "allreduce: %s failed: %s: %s\n", what, baton_code_name(code),
          baton_last_error());
  return 1;
}

int main(void) {
  const char* comm_id = getenv("BATON_COMM_ID");
  const long rank = env_long("BATON_RANK", -1);
  const long world_size = env_long("BATON_WORLD_SIZE", -1);
  const long count = env_long("BATON_COUNT", 1L << 20);
  if (comm_id == NULL || *comm_id == '\0' || rank < 0 || world_size < 1 || rank >= world_size ||
      count < 1) {
    fprintf(stderr,
            "usage: BATON_COMM_ID=<id> BATON_RANK=<r> BATON_WORLD_SIZE=<n> [BATON_SOCKET=<path>]"
            " [BATON_COUNT=<elements>] allreduce\n"
            "  (mint an id with `baton comm-id --socket <path>`; 0 <= rank < world size)\n");
    return 2;
  }

  baton_client_t* client = NULL;
  baton_code_t code = baton_client_connect(NULL, 10000, &client); /* NULL: $BATON_SOCKET */
  if (code != BATON_OK) return fail("connect", code);

  baton_comm_t* comm = NULL;
  code = baton_client_join(client, comm_id, (int)world_size, (int)rank, 60000, &comm);
  if (code != BATON_OK) {
    baton_client_close(client);
    return fail("join", code);
  }

  /* Memory shared with the daemon: it reads and writes the buffer in place. */
  float* data = NULL;
  code = baton_client_alloc(client, (size_t)count * sizeof(float), (void**)&data);
  if (code != BATON_OK) {
    baton_comm_destroy(comm);
    baton_client_close(client);
    return fail("alloc", code);
  }
  for (long i = 0; i < count; ++i) data[i] = (float)(rank + 1) * (float)(i % 1000 + 1);

  int status = 0;
  code = baton_all_reduce(comm, data, data, (size_t)count, BATON_FLOAT32, BATON_SUM, NULL);
  if (code != BATON_OK) {
    status = fail("all_reduce", code);
  } else {
    const float ranks_sum = (float)(world_size * (world_size + 1) / 2);
    long wrong = 0;
    for (long i = 0; i < count; ++i) {
      const float expected = ranks_sum * (float)(i % 1000 + 1);
      if (data[i] != expected) {
        if (wrong == 0) {
          fprintf(stderr, "allreduce: rank %ld: element %ld is %g, expected %g\n", rank, i,
                  (double)data[i], (double)expected);
        }
        ++wrong;
      }
    }
    if (wrong > 0) {
      fprintf(stderr, "allreduce: rank %ld: %ld of %ld elements wrong\n", rank, wrong, count);
      status = 1;
    } else {
      printf("rank %ld/%ld on node %s: all_reduce of %ld float32 OK\n", rank, world_size,
             baton_client_node_name(client), count);
    }
  }

  baton_client_free(client, data);
  code = baton_comm_destroy(comm);
  if (code != BATON_OK && status == 0) status = fail("destroy", code);
  baton_client_close(client);
  return status;
}
