#include "collective/direct_all_to_all.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// Step s (1 <= s < size) carries rank r's block for rank r+s. Every receive is posted first,
// straight into `recv`; then the blocks go out in step order, so that at any time each rank
// mostly sends to one peer and receives from another, and no rank is flooded by everyone at once;
// then the receives are waited for. No send waits for a receive of its own rank: the lockstep of
// one step at a time left links idle while the slowest pair of a step finished (4 unshaped hosts,
// 512 KiB: 1.07-1.16 ms, 0.64-0.91 ms without it).

namespace baton::collective {
namespace {

bool Overlap(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

}  // namespace

absl::Status DirectAllToAll(const OpContext& ctx, const Participants& participants,
                            const void* send, void* recv, size_t count, DataType type) {
  constexpr absl::string_view kWhat = "direct all-to-all";
  const int n = participants.size();
  const int r = participants.rank;
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, r, n));
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count, static_cast<size_t>(n)));
  if (count == 0) return absl::OkStatus();
  if (send == nullptr || recv == nullptr) {
    return absl::InvalidArgumentError("direct all-to-all: needs a send and a receive buffer");
  }
  const size_t element_size = DataTypeSize(type);
  const size_t block_bytes = count * element_size;
  if (Overlap(send, recv, block_bytes * static_cast<size_t>(n))) {
    return absl::InvalidArgumentError(
        "direct all-to-all: the send and receive buffers overlap (in place is not supported)");
  }
  std::memcpy(static_cast<std::byte*>(recv) + static_cast<size_t>(r) * block_bytes,
              static_cast<const std::byte*>(send) + static_cast<size_t>(r) * block_bytes,
              block_bytes);
  if (n == 1) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckParticipantLinks(kWhat, ctx, participants));
  BATON_RETURN_IF_ERROR(internal::CheckChunkCount(kWhat, ctx, type, count));

  const size_t chunk_elements = ChunkElements(ctx.chunk_bytes, type);
  const size_t chunks = ChunkCount(count, chunk_elements);
  auto where = [&](int s) {
    return absl::StrCat("direct all-to-all rank ", r, "/", n, ", step ", s, "/", n - 1);
  };
  auto tag = [&](int s, size_t part) {
    return transport::Tag{ctx.comm, ctx.seq, ctx.first_step + static_cast<uint32_t>(s),
                          static_cast<uint32_t>(part)};
  };
  auto chunk_of = [&](int block, size_t part) {
    return ChunkOf({static_cast<size_t>(block) * count, count}, chunk_elements, part);
  };
  // Every receive is posted before the first send, straight into `recv`, so no send waits for a
  // step's receive and the links stay busy from the first chunk to the last.
  std::vector<std::unique_ptr<transport::PostedRecv>> posted;
  posted.reserve(static_cast<size_t>(n - 1) * chunks);
  for (int s = 1; s < n; ++s) {
    const int from = (r - s + n) % n;
    for (size_t part = 0; part < chunks; ++part) {
      posted.push_back(ctx.endpoint->PostRecv(
          participants.addresses[from], tag(s, part),
          internal::BytesOf(recv, element_size, chunk_of(from, part)), ctx.deadline, nullptr));
    }
  }
  // Sending never writes: the const_cast only lets BytesOf serve both buffers.
  void* const send_data = const_cast<void*>(send);
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n;
    const std::string& to_address = participants.addresses[to];
    for (size_t part = 0; part < chunks; ++part) {
      const absl::Status status = ctx.endpoint->Send(
          to_address, tag(s, part), internal::BytesOf(send_data, element_size, chunk_of(to, part)),
          ctx.deadline);
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, where(s), "sending to", to_address);
      }
    }
  }
  for (int s = 1; s < n; ++s) {
    const std::string& from_address = participants.addresses[(r - s + n) % n];
    for (size_t part = 0; part < chunks; ++part) {
      const absl::Status status = posted[static_cast<size_t>(s - 1) * chunks + part]->Wait();
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, where(s), "receiving from", from_address);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
