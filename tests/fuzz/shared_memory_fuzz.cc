// libFuzzer target: the shared memory that ranks can write and the daemon reads. The input is
// written over a freshly made node arena (whole, or as edits of single fields) or over a
// submission channel page; then the daemon's view of the arena (ArenaOwner: metrics counters,
// abort), a rank's view (Attach, then operations with a deadline already past, which must return
// at once whatever the memory holds), and the daemon's decoding of the channel page
// (ChannelServer::Decode) run on it. None may crash, read outside the memory, or hang.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "collective/arena_owner.h"
#include "collective/node_arena.h"
#include "common/submission_channel.h"
#include "daemon/channel_server.h"

namespace {

using baton::collective::ArenaOwner;
using baton::collective::Collective;
using baton::collective::DataType;
using baton::collective::NodeArena;
using baton::collective::ReduceOp;

void Check(bool ok) {
  if (!ok) std::abort();
}

void Arena(const uint8_t* data, size_t size, int ranks, int rank, bool whole) {
  constexpr size_t kSlot = 256;
  const size_t bytes = NodeArena::Bytes(ranks, kSlot);
  // Exactly the arena's bytes, so that AddressSanitizer sees a read past its end.
  auto memory = std::make_unique<std::byte[]>(bytes);
  std::vector<int> comm_ranks(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) comm_ranks[static_cast<size_t>(r)] = 2 * r + 1;
  absl::StatusOr<ArenaOwner> owner = ArenaOwner::Create(memory.get(), bytes, comm_ranks, kSlot);
  Check(owner.ok());
  if (whole) {
    std::memcpy(memory.get(), data, std::min(size, bytes));
  } else {
    // Edits of a valid arena, so that most inputs still attach: 2 bytes of offset, then 8 of
    // value, written over whatever field lies there.
    for (size_t at = 0; at + 10 <= size; at += 10) {
      uint16_t offset = 0;
      std::memcpy(&offset, data + at, sizeof(offset));
      const size_t where = offset % (bytes - sizeof(uint64_t) + 1);
      std::memcpy(memory.get() + where, data + at + 2, sizeof(uint64_t));
    }
  }

  // The daemon's view: whatever the memory holds, it reads its own ranks' blocks only.
  for (int r = -1; r <= ranks; ++r) {
    for (int kind = 0; kind < NodeArena::kCountedKinds; ++kind) {
      (void)owner->counters(r, static_cast<Collective>(kind));
    }
  }

  // A rank's view, if the header still describes an arena of these bytes.
  absl::StatusOr<NodeArena> arena = NodeArena::Attach(memory.get(), bytes, rank);
  if (arena.ok()) {
    Check(arena->ranks() >= 1 && arena->ranks() <= NodeArena::kMaxRanks);
    Check(NodeArena::Bytes(arena->ranks(), arena->slot_bytes()) <= bytes);
    (void)arena->aborted();
    const absl::Time past = absl::Now();
    float values[4] = {1, 2, 3, 4};
    (void)arena->Barrier(past);
    (void)arena->AllReduce(values, values, 4, DataType::kFloat32, ReduceOp::kSum, past);
    (void)arena->Broadcast(values, values, 4, DataType::kFloat32, 0, past);
    (void)arena->AllGather(values, values, 1, DataType::kFloat32, past);
  }
  // The daemon aborts it last, as when a rank goes away.
  owner->Abort(absl::AbortedError("fuzz"));
  Check(!NodeArena::Attach(memory.get(), bytes, 0).ok() ||
        !NodeArena::Attach(memory.get(), bytes, 0)->aborted().ok());
}

void Channel(const uint8_t* data, size_t size) {
  auto page = std::make_unique<baton::channel::Layout>();
  std::memcpy(static_cast<void*>(page.get()), data, std::min(size, sizeof(*page)));
  (void)baton::daemon::ChannelServer::Decode(page->op, page->vectors);
  std::string algorithm;
  (void)baton::channel::ReadResult(page->result, &algorithm);
  Check(algorithm.size() <= sizeof(page->result.algorithm));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The first byte picks the structure (and for the arena: whole or edits), the second the
  // arena's ranks and the rank viewing it.
  const int ranks = 1 + data[1] % 4;
  const int rank = (data[1] >> 4) % ranks;
  if (data[0] % 3 != 2) {
    Arena(data + 2, size - 2, ranks, rank, /*whole=*/data[0] % 3 == 1);
  } else {
    Channel(data + 2, size - 2);
  }
  return 0;
}
