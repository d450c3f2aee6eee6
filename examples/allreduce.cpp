// A float32 sum all-reduce through libbaton's C++ API, one process per rank.
//
// Environment: BATON_SOCKET (the node's batond; unset: /run/baton/batond.sock), BATON_COMM_ID
// (from `baton comm-id`, the same for every rank), BATON_RANK, BATON_WORLD_SIZE, and optionally
// BATON_COUNT (elements, default 1048576).
//
// Rank r contributes (r + 1) * (i % 1000 + 1) at index i, so every element of the result must be
// world_size * (world_size + 1) / 2 * (i % 1000 + 1) (exact in float32 for up to 180 ranks).
// Exits non-zero with libbaton's message on any failure.
#include <baton/baton.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

namespace {

// The integer in environment variable `name`, `fallback` if unset, nullopt if malformed.
std::optional<long> EnvLong(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1L << 30) return std::nullopt;
  return value;
}

int Fail(const std::string& what, const baton::Status& status) {
  std::cerr << "allreduce: " << what << " failed: " << status << "\n";
  return 1;
}

}  // namespace

int main() {
  const char* comm_id = std::getenv("BATON_COMM_ID");
  const std::optional<long> rank = EnvLong("BATON_RANK", -1);
  const std::optional<long> world_size = EnvLong("BATON_WORLD_SIZE", -1);
  const std::optional<long> count = EnvLong("BATON_COUNT", 1L << 20);
  if (comm_id == nullptr || *comm_id == '\0' || !rank || !world_size || !count || *rank < 0 ||
      *world_size < 1 || *rank >= *world_size || *count < 1) {
    std::cerr << "usage: BATON_COMM_ID=<id> BATON_RANK=<r> BATON_WORLD_SIZE=<n>"
                 " [BATON_SOCKET=<path>] [BATON_COUNT=<elements>] allreduce_cpp\n"
                 "  (mint an id with `baton comm-id --socket <path>`; 0 <= rank < world size)\n";
    return 2;
  }

  baton::StatusOr<std::unique_ptr<baton::Client>> client = baton::Client::Connect();
  if (!client.ok()) return Fail("connect", client.status());

  baton::StatusOr<std::unique_ptr<baton::Communicator>> comm = (*client)->Join(
      comm_id, static_cast<int>(*world_size), static_cast<int>(*rank), std::chrono::seconds(60));
  if (!comm.ok()) return Fail("join", comm.status());

  // Memory shared with the daemon: it reads and writes the buffer in place.
  const size_t n = static_cast<size_t>(*count);
  baton::StatusOr<void*> memory = (*client)->Allocate(n * sizeof(float));
  if (!memory.ok()) return Fail("allocate", memory.status());
  auto* data = static_cast<float*>(*memory);
  for (size_t i = 0; i < n; ++i) data[i] = float(*rank + 1) * float(i % 1000 + 1);

  const baton::Status reduced =
      (*comm)->AllReduce(data, data, n, baton::DataType::kFloat32, baton::ReduceOp::kSum);
  if (!reduced.ok()) return Fail("all_reduce", reduced);

  const float ranks_sum = float(*world_size * (*world_size + 1) / 2);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const float expected = ranks_sum * float(i % 1000 + 1);
    if (data[i] != expected && wrong++ == 0) {
      std::cerr << "allreduce: rank " << *rank << ": element " << i << " is " << data[i]
                << ", expected " << expected << "\n";
    }
  }
  if (wrong > 0) {
    std::cerr << "allreduce: rank " << *rank << ": " << wrong << " of " << n << " elements wrong\n";
    return 1;
  }
  std::cout << "rank " << *rank << "/" << *world_size << " on node " << (*client)->node_name()
            << ": all_reduce of " << n << " float32 OK\n";

  // The communicator leaves before the client closes (both also happen in the destructors).
  if (baton::Status left = (*comm)->Destroy(); !left.ok()) return Fail("destroy", left);
  return 0;
}
