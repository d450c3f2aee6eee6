/* libbaton's C API: the stable boundary of the client library that ranks link.
 *
 * A rank (a training or inference process) connects to its node's batond, joins a communicator
 * with the other ranks, and runs collectives on its buffers through the daemon:
 *
 *   baton_client_t* client;
 *   baton_client_connect(NULL, 10000, &client);             // NULL: baton_default_socket_path()
 *   char id[BATON_COMM_ID_MAX];
 *   if (rank == 0) baton_client_create_comm_id(client, id, sizeof id);   // share out of band
 *   baton_comm_t* comm;
 *   baton_client_join(client, id, world_size, rank, 60000, &comm);
 *   float* data;
 *   baton_client_alloc(client, n * sizeof(float), (void**)&data);      // zero-copy buffer
 *   baton_all_reduce(comm, data, data, n, BATON_FLOAT32, BATON_SUM, NULL);
 *   baton_comm_destroy(comm);
 *   baton_client_close(client);
 *
 * Errors: every call that can fail returns a baton_code_t (BATON_OK on success; the codes are
 * gRPC's and absl's canonical codes) and leaves a message for the calling thread in
 * baton_last_error(). Nothing blocks forever: every blocking call has a deadline.
 *
 * Buffers from baton_client_alloc are shared with the daemon, which reads and writes them in
 * place. Any other pointer works too: its bytes are staged through a shared buffer with one copy
 * each way.
 *
 * Threads: a client may be used from several threads at once, and so may a communicator; the
 * operations of one communicator run one at a time, in the order they were submitted. Handles
 * are freed by exactly one call (baton_client_close, baton_comm_destroy, baton_request_free),
 * after which they must not be used. A communicator may outlive its client; its calls then fail.
 *
 * This header needs only the C standard library, and libbaton exports only the symbols declared
 * here (all prefixed baton_). Link with `pkg-config --libs baton` or CMake's Baton::baton.
 */
#ifndef BATON_BATON_H_
#define BATON_BATON_H_

#include <stddef.h>
#include <stdint.h>

#include "baton/version.h"

#if defined(__GNUC__)
#define BATON_API __attribute__((visibility("default")))
#else
#define BATON_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Errors ---------------------------------------------------------------------------- */

/* The canonical status codes (the same numbers as gRPC's and absl's). */
typedef enum baton_code {
  BATON_OK = 0,
  BATON_CANCELLED = 1,
  BATON_UNKNOWN = 2,
  BATON_INVALID_ARGUMENT = 3,  /* bad argument; nothing changed, the handle stays usable */
  BATON_DEADLINE_EXCEEDED = 4, /* a deadline passed; the message names what was waited for */
  BATON_NOT_FOUND = 5,
  BATON_ALREADY_EXISTS = 6,
  BATON_PERMISSION_DENIED = 7,
  BATON_RESOURCE_EXHAUSTED = 8,
  BATON_FAILED_PRECONDITION = 9, /* e.g. ranks called different collectives */
  BATON_ABORTED = 10,
  BATON_OUT_OF_RANGE = 11, /* e.g. an output buffer too small for the answer */
  BATON_UNIMPLEMENTED = 12,
  BATON_INTERNAL = 13,
  BATON_UNAVAILABLE = 14, /* a daemon or rank was lost; the message names it */
  BATON_DATA_LOSS = 15,
  BATON_UNAUTHENTICATED = 16
} baton_code_t;

/* The message of the last call on this thread that returned an error, or "" if the last call
 * succeeded. Valid until the thread's next libbaton call. Never NULL. */
BATON_API const char* baton_last_error(void);

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_CODE" for a value outside the enum. */
BATON_API const char* baton_code_name(baton_code_t code);

/* The library's version, "MAJOR.MINOR.PATCH" (BATON_VERSION_STRING of the built library). */
BATON_API const char* baton_version(void);

/* ---- Element types, reduce operators, collectives, algorithms -------------------------- */

typedef enum baton_dtype {
  BATON_INT8 = 0,
  BATON_UINT8 = 1,
  BATON_INT32 = 2,
  BATON_UINT32 = 3,
  BATON_INT64 = 4,
  BATON_UINT64 = 5,
  BATON_FLOAT16 = 6,
  BATON_BFLOAT16 = 7,
  BATON_FLOAT32 = 8,
  BATON_FLOAT64 = 9,
  BATON_FP8_E4M3 = 10,
  BATON_FP8_E5M2 = 11
} baton_dtype_t;

typedef enum baton_reduce_op {
  BATON_SUM = 0,
  BATON_PROD = 1,
  BATON_MIN = 2,
  BATON_MAX = 3,
  BATON_AVG = 4 /* the sum, divided by the number of ranks once at the end */
} baton_reduce_op_t;

typedef enum baton_collective {
  BATON_ALL_REDUCE = 0,
  BATON_REDUCE_SCATTER = 1,
  BATON_ALL_GATHER = 2,
  BATON_BROADCAST = 3,
  BATON_REDUCE = 4,
  BATON_ALL_TO_ALL = 5,
  BATON_BARRIER = 6,
  BATON_GATHER = 7,
  BATON_SCATTER = 8,
  BATON_ALL_TO_ALL_V = 9,
  BATON_SEND = 10,
  BATON_RECV = 11
} baton_collective_t;

typedef enum baton_algorithm {
  BATON_ALGORITHM_AUTO = 0, /* the daemons' tuner chooses (or $BATON_ALGO, see below) */
  BATON_ALGORITHM_RING = 1,
  BATON_ALGORITHM_TREE = 2,
  BATON_ALGORITHM_DIRECT = 3,
  BATON_ALGORITHM_DOUBLING = 4,
  BATON_ALGORITHM_HALVING_DOUBLING = 5
} baton_algorithm_t;

/* Names as the CLI, metrics and errors write them: "float32", "sum", "all_reduce", "ring";
 * "unknown" for a value outside the enum. The parse calls return BATON_INVALID_ARGUMENT for a
 * name they do not know, and leave *out unchanged. */
BATON_API const char* baton_dtype_name(baton_dtype_t type);
BATON_API baton_code_t baton_dtype_parse(const char* name, baton_dtype_t* out);
/* Bytes per element; 0 for a value outside the enum. */
BATON_API size_t baton_dtype_size(baton_dtype_t type);
BATON_API const char* baton_reduce_op_name(baton_reduce_op_t op);
BATON_API baton_code_t baton_reduce_op_parse(const char* name, baton_reduce_op_t* out);
BATON_API const char* baton_collective_name(baton_collective_t collective);
BATON_API baton_code_t baton_collective_parse(const char* name, baton_collective_t* out);
/* BATON_ALGORITHM_AUTO is "auto". */
BATON_API const char* baton_algorithm_name(baton_algorithm_t algorithm);
BATON_API baton_code_t baton_algorithm_parse(const char* name, baton_algorithm_t* out);
/* Whether `algorithm` implements `collective` (AUTO implements every collective). */
BATON_API int baton_algorithm_supports(baton_algorithm_t algorithm, baton_collective_t collective);

/* ---- Handles ---------------------------------------------------------------------------- */

typedef struct baton_client baton_client_t;   /* a session with the node's daemon */
typedef struct baton_comm baton_comm_t;       /* one rank's membership of a communicator */
typedef struct baton_request baton_request_t; /* an operation submitted without waiting */

/* ---- Client ----------------------------------------------------------------------------- */

/* $BATON_SOCKET if set, else "/run/baton/batond.sock". Valid until this thread's next call. */
BATON_API const char* baton_default_socket_path(void);

/* Opens a session with the daemon listening on `socket_path` (NULL or "": the default path).
 * BATON_UNAVAILABLE if no daemon answers within `timeout_ms` (<= 0: 10 seconds). */
BATON_API baton_code_t baton_client_connect(const char* socket_path, int64_t timeout_ms,
                                            baton_client_t** client);

/* Frees the client's buffers, closes its session and frees the handle. NULL is ignored.
 * Communicators joined through it keep their handles, but their calls then fail. */
BATON_API void baton_client_close(baton_client_t* client);

/* The name of the node whose daemon the client talks to; valid as long as the client. */
BATON_API const char* baton_client_node_name(const baton_client_t* client);

/* Longest communicator id, with its terminating NUL. */
#define BATON_COMM_ID_MAX 256

/* Writes a new communicator id rooted at this client's daemon ("<address>/<secret>", NUL
 * terminated) into `id` (`id_size` bytes; BATON_COMM_ID_MAX always suffices). Share it with every
 * rank out of band. BATON_OUT_OF_RANGE if `id_size` is too small. */
BATON_API baton_code_t baton_client_create_comm_id(baton_client_t* client, char* id,
                                                   size_t id_size);

/* Joins as rank `rank` of `world_size` the communicator `comm_id`, waiting up to `timeout_ms`
 * (<= 0: 60 seconds) for every rank to join; BATON_DEADLINE_EXCEEDED names the ranks that never
 * arrived. */
BATON_API baton_code_t baton_client_join(baton_client_t* client, const char* comm_id,
                                         int world_size, int rank, int64_t timeout_ms,
                                         baton_comm_t** comm);

/* Memory shared with the daemon (zero copies between rank and daemon). Valid until
 * baton_client_free or baton_client_close. `bytes` must be positive. */
BATON_API baton_code_t baton_client_alloc(baton_client_t* client, size_t bytes, void** data);
/* BATON_INVALID_ARGUMENT if `data` did not come from baton_client_alloc on this client. */
BATON_API baton_code_t baton_client_free(baton_client_t* client, void* data);

/* ---- Daemon status ---------------------------------------------------------------------- */

/* The status of the daemon listening on `socket_path` (NULL or "": the default path) as JSON: the
 * document `baton status --json` prints. An object with the daemon's node_name, version, pid,
 * uptime_ms, peer/data/metrics addresses, the number of sessions, its communicators (comm_tag,
 * world_size, local_ranks, daemon_count, ops_completed, state) and its links to peer daemons
 * (bytes, errors, probes, peer_up, ...): the fields of DaemonStatus in proto/baton/v1/baton.proto
 * under their proto names, every field present, 64-bit integers as strings (protobuf's JSON
 * mapping). Fields may be added in later versions.
 *
 * Asks the daemon over its API without opening a session (so it needs no client, and is not
 * counted among the sessions), waiting up to `timeout_ms` (<= 0: 5 seconds); BATON_UNAVAILABLE,
 * naming the socket, if no daemon answers.
 *
 * Writes the document, NUL terminated, into `json` (`json_size` bytes) and its size with the NUL
 * into *needed (if `needed` is not NULL). BATON_OUT_OF_RANGE, with *needed set, if `json_size` is
 * too small; `json` may be NULL when `json_size` is 0. Each call asks the daemon anew, so a second
 * call with *needed bytes may find the status grown: call again with more. */
BATON_API baton_code_t baton_daemon_status_json(const char* socket_path, int64_t timeout_ms,
                                                char* json, size_t json_size, size_t* needed);

/* ---- Communicator ----------------------------------------------------------------------- */

BATON_API int baton_comm_rank(const baton_comm_t* comm);
BATON_API int baton_comm_world_size(const baton_comm_t* comm);
/* The number of daemons (nodes) the communicator spans. */
BATON_API int baton_comm_daemon_count(const baton_comm_t* comm);

/* Leaves the communicator once the operations already submitted have finished (like
 * ncclCommFinalize). The handle stays valid, and later operations on it fail with
 * BATON_FAILED_PRECONDITION. The other ranks' collectives from the next one this rank did not
 * submit fail at once with BATON_FAILED_PRECONDITION naming this rank (it will never take part);
 * their earlier ones, and the messages this rank sent before, are not affected. Idempotent: later
 * calls return BATON_OK. */
BATON_API baton_code_t baton_comm_leave(baton_comm_t* comm);

/* Leaves the communicator if baton_comm_leave was not called, and frees the handle (also when
 * leaving fails). Returns the result of leaving. NULL is ignored and returns BATON_OK. */
BATON_API baton_code_t baton_comm_destroy(baton_comm_t* comm);

/* Collective over `comm`, like MPI_Comm_split / ncclCommSplit: the ranks passing the same
 * `color` form a new communicator, ranked by (key, rank in comm). A negative color joins none
 * and sets *out to NULL. Every rank of `comm` must call it: if one does not within `timeout_ms`
 * (<= 0: 60 seconds), the others fail with BATON_DEADLINE_EXCEEDED (or BATON_UNAVAILABLE naming
 * the daemon they waited for), like a collective. */
BATON_API baton_code_t baton_comm_split(baton_comm_t* comm, int color, int key, int64_t timeout_ms,
                                        baton_comm_t** out);

/* The algorithm that ran the last successful operation of this rank ("ring", "tree", "direct",
 * "doubling", "halving_doubling"; "local" when every rank is on one daemon and the daemon ran it,
 * "arena" when the ranks ran it in their node arena without the daemon; "" before the first),
 * written NUL terminated into `name`. BATON_OUT_OF_RANGE if `name_size` is too
 * small (32 always suffices). */
BATON_API baton_code_t baton_comm_last_algorithm(const baton_comm_t* comm, char* name,
                                                 size_t name_size);

/* One algorithm as the daemons' tuner sees it (baton_comm_explain). */
typedef struct baton_algorithm_estimate {
  baton_algorithm_t algorithm;
  double predicted_seconds; /* the cost model's prediction */
  double measured_seconds;  /* the daemons' agreed mean time, or a negative value if none yet */
  int64_t measured_samples; /* samples behind measured_seconds so far */
} baton_algorithm_estimate_t;

/* What the tuner predicts for `collective` with `count` elements of `type` (counted as that
 * collective's call counts them): every algorithm that implements it, cheapest first, which is
 * the one the daemon runs unless a call forces another. Writes at most `capacity` estimates and
 * their number to *written; no estimate when every rank shares one daemon. */
BATON_API baton_code_t baton_comm_explain(baton_comm_t* comm, baton_collective_t collective,
                                          size_t count, baton_dtype_t type,
                                          baton_algorithm_estimate_t* estimates, size_t capacity,
                                          size_t* written);

/* ---- Device memory ---------------------------------------------------------------------- */

/* GPU buffers work in every collective, like host buffers, given as device pointers. The daemon
 * maps them (CUDA VMM memory by file descriptor, cudaMalloc memory by legacy IPC handle), so
 * nothing is copied between rank and daemon; memory that can be shared neither way (e.g. from
 * cudaMallocAsync's default pool) gets BATON_FAILED_PRECONDITION.
 *
 * Stream order: a call with options.on_stream set runs after the work enqueued on
 * options.stream before it, work enqueued on the stream after it waits for it, and the call
 * returns at once, without waiting on the host (like NCCL). Its buffers must be device memory.
 * Its outcome is the communicator's asynchronous error (baton_comm_get_async_error): a failed
 * call still releases the stream (nothing hangs), and later stream-ordered calls on that
 * communicator then fail at once. Each rank needs its own stream: a call on a stream where
 * another rank of the same communicator has calls pending gets BATON_INVALID_ARGUMENT (the two
 * would wait for each other forever). Not yet in a group.
 *
 * The daemon keeps its mapping of a device allocation until the session ends or the allocation
 * is deregistered: deregister memory from other allocators before freeing it (like
 * ncclCommDeregister). $BATON_DEVICE picks the implementation: auto (default: CUDA when there is
 * a driver and GPU), cuda, none, or fake (host memory posing as a GPU, for tests). */

/* Device memory of GPU `device` (the CUDA ordinal) shared with the daemon, zero copies; valid
 * until baton_client_free_device or baton_client_close. BATON_FAILED_PRECONDITION without a
 * GPU. */
BATON_API baton_code_t baton_client_alloc_device(baton_client_t* client, size_t bytes, int device,
                                                 void** data);
BATON_API baton_code_t baton_client_free_device(baton_client_t* client, void* data);
/* Registers the device allocation holding [data, data + bytes) with the daemon now (collectives
 * register device memory on first use anyway) / forgets it: call before freeing it. */
BATON_API baton_code_t baton_client_register_device(baton_client_t* client, const void* data,
                                                    size_t bytes);
BATON_API baton_code_t baton_client_deregister_device(baton_client_t* client, const void* data);
/* BATON_OK, or the first failure of a stream-ordered call on `comm` (with its message in
 * baton_last_error), like ncclCommGetAsyncError. */
BATON_API baton_code_t baton_comm_get_async_error(const baton_comm_t* comm);

/* ---- Collectives ------------------------------------------------------------------------ */

/* Per-call options; NULL means the defaults. Initialise with baton_call_options_init so that
 * fields added later get their defaults. */
typedef struct baton_call_options {
  size_t struct_size;          /* sizeof(baton_call_options_t), set by baton_call_options_init */
  int64_t timeout_ms;          /* <= 0: 10 minutes. The operation fails at this deadline. */
  baton_algorithm_t algorithm; /* AUTO: $BATON_ALGO ("ring", "tree", ...) if set, for the
                                  collectives it implements, else the tuner's choice. Otherwise
                                  the algorithm must implement the collective. Every rank must
                                  choose the same. */
  int on_stream; /* nonzero: a stream-ordered call on device memory ("Device memory" below) */
  void* stream;  /* with on_stream: the cudaStream_t (NULL: the default stream) */
} baton_call_options_t;

BATON_API void baton_call_options_init(baton_call_options_t* options);

/* ---- Submitting an operation ------------------------------------------------------------ */

/* One operation, as baton_submit takes it: every named call below is baton_submit with the fields
 * of its arguments set (its name says `collective`). A field the collective does not read is
 * ignored. */
typedef struct baton_op {
  size_t struct_size;            /* sizeof(baton_op_t), set by baton_op_init */
  baton_collective_t collective; /* BATON_ALL_REDUCE ... BATON_RECV */
  const void* send;              /* the named call's send (baton_send's buf) */
  void* recv;                    /* the named call's recv (baton_recv's buf) */
  size_t count;         /* the named call's count: recv_count of reduce_scatter, send_count of
                           all_gather; unused by barrier and all_to_all_v */
  baton_dtype_t type;   /* unused by barrier */
  baton_reduce_op_t op; /* all_reduce, reduce_scatter, reduce */
  int root;             /* broadcast, reduce, gather, scatter */
  int peer;             /* send, recv */
  /* all_to_all_v: four arrays of `entries` elements (baton_all_to_all_v), copied before
   * baton_submit returns. */
  const size_t* send_counts;
  const size_t* send_displs;
  const size_t* recv_counts;
  const size_t* recv_displs;
  size_t entries;
} baton_op_t;

/* Fills *op with its size and defaults: BATON_ALL_REDUCE of 0 elements of BATON_FLOAT32 with
 * BATON_SUM, root and peer 0, no buffers or arrays. */
BATON_API void baton_op_init(baton_op_t* op);

/* Submits `op` on `comm` with `options` (NULL: defaults). With `request` NULL the call blocks
 * like the named calls below and returns the operation's code; otherwise it returns at once with
 * a request in *request, like the _async calls (an argument error is then the request's, and the
 * call fails only when it cannot make one). BATON_INVALID_ARGUMENT for a NULL comm or op, an
 * op whose struct_size is too small, or an unknown collective. */
BATON_API baton_code_t baton_submit(baton_comm_t* comm, const baton_op_t* op,
                                    const baton_call_options_t* options, baton_request_t** request);

/* Each collective returns once this rank's part is done. Buffer sizes are in elements of `type`;
 * `send` may equal `recv` (in place) where both exist. Errors: BATON_INVALID_ARGUMENT for bad
 * arguments (the communicator stays usable); BATON_UNAVAILABLE / BATON_DEADLINE_EXCEEDED naming
 * the peer at fault when a rank or daemon is lost (the communicator is then aborted on every
 * rank); BATON_FAILED_PRECONDITION when ranks disagree on the call. */

/* recv[i] = op over all ranks of send[i], for i < count, on every rank. */
BATON_API baton_code_t baton_all_reduce(baton_comm_t* comm, const void* send, void* recv,
                                        size_t count, baton_dtype_t type, baton_reduce_op_t op,
                                        const baton_call_options_t* options);
/* recv (recv_count elements) = block `rank` of op over all ranks' send (recv_count * world_size
 * elements). */
BATON_API baton_code_t baton_reduce_scatter(baton_comm_t* comm, const void* send, void* recv,
                                            size_t recv_count, baton_dtype_t type,
                                            baton_reduce_op_t op,
                                            const baton_call_options_t* options);
/* recv (send_count * world_size elements) = every rank's send, in rank order. */
BATON_API baton_code_t baton_all_gather(baton_comm_t* comm, const void* send, void* recv,
                                        size_t send_count, baton_dtype_t type,
                                        const baton_call_options_t* options);
/* recv = root's send (count elements) on every rank; send is read on the root only. */
BATON_API baton_code_t baton_broadcast(baton_comm_t* comm, const void* send, void* recv,
                                       size_t count, baton_dtype_t type, int root,
                                       const baton_call_options_t* options);
/* root's recv = op over all ranks' send (count elements); recv is written on the root only. */
BATON_API baton_code_t baton_reduce(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                    baton_dtype_t type, baton_reduce_op_t op, int root,
                                    const baton_call_options_t* options);
/* Block j (count elements) of this rank's send goes to rank j; block i of recv comes from rank
 * i. Both buffers hold count * world_size elements. */
BATON_API baton_code_t baton_all_to_all(baton_comm_t* comm, const void* send, void* recv,
                                        size_t count, baton_dtype_t type,
                                        const baton_call_options_t* options);
/* Returns once every rank has entered the barrier. */
BATON_API baton_code_t baton_barrier(baton_comm_t* comm, const baton_call_options_t* options);

/* root's recv (count * world_size elements) = every rank's send (count elements), in rank order.
 * recv is neither read nor written off the root, and may be NULL there. */
BATON_API baton_code_t baton_gather(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                    baton_dtype_t type, int root,
                                    const baton_call_options_t* options);
/* recv (count elements) = block `rank` of root's send (count * world_size elements). send is read
 * on the root only, and may be NULL elsewhere. */
BATON_API baton_code_t baton_scatter(baton_comm_t* comm, const void* send, void* recv, size_t count,
                                     baton_dtype_t type, int root,
                                     const baton_call_options_t* options);
/* Like MPI_Alltoallv (PyTorch's all_to_all_single with split sizes): send_counts[j] elements
 * starting at element send_displs[j] of send go to rank j; the recv_counts[i] elements from rank
 * i land at element recv_displs[i] of recv. Each array has `entries` elements, which must be the
 * world size. Counts may differ between peers and may be 0; recv_counts[i] must equal rank i's
 * send_counts[rank]. send spans max_j(send_displs[j] + send_counts[j]) elements, recv likewise.
 * BATON_INVALID_ARGUMENT, before anything is submitted, for a NULL array, `entries` other than
 * the world size, a displacement + count that overflows, or recv blocks that overlap. */
BATON_API baton_code_t baton_all_to_all_v(baton_comm_t* comm, const void* send,
                                          const size_t* send_counts, const size_t* send_displs,
                                          void* recv, const size_t* recv_counts,
                                          const size_t* recv_displs, size_t entries,
                                          baton_dtype_t type, const baton_call_options_t* options);

/* ---- Point to point --------------------------------------------------------------------- */

/* Sends `count` elements of `buf` to rank `peer` of `comm`; returns once the daemon has taken the
 * data (it never waits for the matching receive, so `buf` may be reused at once). Any count,
 * including 0. Messages between two ranks are matched in order: the n-th send from rank a to rank
 * b meets b's n-th receive from a. A rank may have several sends and receives outstanding (the
 * _async forms, or a group). */
BATON_API baton_code_t baton_send(baton_comm_t* comm, const void* buf, size_t count,
                                  baton_dtype_t type, int peer,
                                  const baton_call_options_t* options);
/* Receives rank `peer`'s next message to this rank into `buf` (`count` elements); returns once the
 * data is in `buf`. A count that differs from the matching send's fails the receive with
 * BATON_FAILED_PRECONDITION naming both counts and aborts the communicator with that error: the
 * send fails with it too when its receive was already waiting on the same daemon; otherwise the
 * send has completed (it never waits for its receive), and the sender's pending and next
 * operations fail with it. */
BATON_API baton_code_t baton_recv(baton_comm_t* comm, void* buf, size_t count, baton_dtype_t type,
                                  int peer, const baton_call_options_t* options);

/* ---- Groups ----------------------------------------------------------------------------- */

/* Like ncclGroupStart/ncclGroupEnd. Groups belong to the calling thread and nest: only the
 * outermost baton_group_end acts.
 *
 * Between baton_group_start and baton_group_end, the operations this thread calls (collectives,
 * send and receive, blocking or _async, on any communicator) are queued, not run:
 *  - a blocking call returns BATON_OK at once (or BATON_INVALID_ARGUMENT, for an argument error
 *    it can see at once; that call is not queued); its outcome comes from baton_group_end. Its
 *    buffers must stay valid and unchanged until then;
 *  - an _async call returns a request that completes after baton_group_end submitted it; waiting
 *    on it before then returns BATON_FAILED_PRECONDITION at once (done = 0).
 * baton_group_end submits the group's sends first, in the order they were called, then its other
 * operations, in the order they were called, and waits until all of them have completed. It
 * returns BATON_OK or the first error (in call order; argument errors of calls in the group
 * first), and BATON_FAILED_PRECONDITION without a matching baton_group_start. Since a send
 * completes once the daemon has its data, a ring exchange of send+receive pairs in a group cannot
 * deadlock, whatever order they were queued in; per pair of ranks, sends keep their order and
 * receives theirs.
 *
 * Not queued: baton_comm_split fails with BATON_FAILED_PRECONDITION inside a group;
 * baton_comm_abort runs at once (the group's operations on that communicator then fail with
 * BATON_ABORTED); baton_comm_leave and baton_comm_destroy fail that communicator's queued
 * operations with BATON_FAILED_PRECONDITION first. Every other call runs at once as usual. A
 * communicator with operations in another thread's open group must not be destroyed. */
BATON_API baton_code_t baton_group_start(void);
BATON_API baton_code_t baton_group_end(void);

/* ---- Abort ------------------------------------------------------------------------------ */

/* Aborts `comm` on every rank (like ncclCommAbort, but for all ranks): the pending and future
 * operations of the communicator fail with BATON_ABORTED and a message that contains `reason`
 * (NULL or "": "no reason given"; at most 512 bytes of it are kept) on every rank, within about a
 * second. This rank's queued operations fail at once. Returns within a few seconds even if the
 * daemon is gone: this rank's side is aborted anyway, and the returned error (e.g.
 * BATON_UNAVAILABLE) says the other ranks may not have been told. Idempotent; the handle must
 * still be freed with baton_comm_destroy. */
BATON_API baton_code_t baton_comm_abort(baton_comm_t* comm, const char* reason);

/* ---- Non-blocking collectives ----------------------------------------------------------- */

/* The same operations, returning at once with a request in *request. An operation runs after
 * every operation submitted before it on the communicator (blocking or not). Its buffers must
 * stay valid and unchanged until it completes. An argument error is reported by the request,
 * not by the call; the call fails only when it cannot make a request (BATON_INVALID_ARGUMENT for
 * a NULL comm or request). */
BATON_API baton_code_t baton_all_reduce_async(baton_comm_t* comm, const void* send, void* recv,
                                              size_t count, baton_dtype_t type,
                                              baton_reduce_op_t op,
                                              const baton_call_options_t* options,
                                              baton_request_t** request);
BATON_API baton_code_t baton_reduce_scatter_async(baton_comm_t* comm, const void* send, void* recv,
                                                  size_t recv_count, baton_dtype_t type,
                                                  baton_reduce_op_t op,
                                                  const baton_call_options_t* options,
                                                  baton_request_t** request);
BATON_API baton_code_t baton_all_gather_async(baton_comm_t* comm, const void* send, void* recv,
                                              size_t send_count, baton_dtype_t type,
                                              const baton_call_options_t* options,
                                              baton_request_t** request);
BATON_API baton_code_t baton_broadcast_async(baton_comm_t* comm, const void* send, void* recv,
                                             size_t count, baton_dtype_t type, int root,
                                             const baton_call_options_t* options,
                                             baton_request_t** request);
BATON_API baton_code_t baton_reduce_async(baton_comm_t* comm, const void* send, void* recv,
                                          size_t count, baton_dtype_t type, baton_reduce_op_t op,
                                          int root, const baton_call_options_t* options,
                                          baton_request_t** request);
BATON_API baton_code_t baton_all_to_all_async(baton_comm_t* comm, const void* send, void* recv,
                                              size_t count, baton_dtype_t type,
                                              const baton_call_options_t* options,
                                              baton_request_t** request);
BATON_API baton_code_t baton_barrier_async(baton_comm_t* comm, const baton_call_options_t* options,
                                           baton_request_t** request);
BATON_API baton_code_t baton_gather_async(baton_comm_t* comm, const void* send, void* recv,
                                          size_t count, baton_dtype_t type, int root,
                                          const baton_call_options_t* options,
                                          baton_request_t** request);
BATON_API baton_code_t baton_scatter_async(baton_comm_t* comm, const void* send, void* recv,
                                           size_t count, baton_dtype_t type, int root,
                                           const baton_call_options_t* options,
                                           baton_request_t** request);
/* The arrays are copied before the call returns. */
BATON_API baton_code_t baton_all_to_all_v_async(
    baton_comm_t* comm, const void* send, const size_t* send_counts, const size_t* send_displs,
    void* recv, const size_t* recv_counts, const size_t* recv_displs, size_t entries,
    baton_dtype_t type, const baton_call_options_t* options, baton_request_t** request);
/* A send's request completes once the daemon has taken the data; until then `buf` must stay
 * unchanged. */
BATON_API baton_code_t baton_send_async(baton_comm_t* comm, const void* buf, size_t count,
                                        baton_dtype_t type, int peer,
                                        const baton_call_options_t* options,
                                        baton_request_t** request);
BATON_API baton_code_t baton_recv_async(baton_comm_t* comm, void* buf, size_t count,
                                        baton_dtype_t type, int peer,
                                        const baton_call_options_t* options,
                                        baton_request_t** request);

/* Waits up to `timeout_ms` (< 0: no limit; 0: just looks) for the request. When it has completed,
 * sets *done (if not NULL) to 1 and returns the operation's code, with its message in
 * baton_last_error(). While it is still running, sets *done to 0 and returns
 * BATON_DEADLINE_EXCEEDED; wait again later. May be called any number of times. */
BATON_API baton_code_t baton_request_wait(baton_request_t* request, int64_t timeout_ms, int* done);

/* Frees the handle. Does not cancel: the operation still runs. NULL is ignored. */
BATON_API void baton_request_free(baton_request_t* request);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BATON_BATON_H_ */
