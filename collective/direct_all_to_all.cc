#include "collective/direct_all_to_all.h"

#include <cstdint>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// In step s (1 <= s < size) rank r sends its block for rank r+s and receives rank r-s's block
// for it, so that in every step each rank sends to one peer and receives from another, and no
// rank is flooded by everyone at once. Within a step the sends run one chunk ahead of the
// receives, as in the ring (ring_steps.cc): sends return once the transport has the bytes, so
// nobody waits for a peer that is itself waiting.

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
  // Sending never writes: the const_cast only lets BytesOf serve both buffers.
  void* const send_data = const_cast<void*>(send);
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n;
    const int from = (r - s + n) % n;
    const std::string& to_address = participants.addresses[to];
    const std::string& from_address = participants.addresses[from];
    auto where = [&] {
      return absl::StrCat("direct all-to-all rank ", r, "/", n, ", step ", s, "/", n - 1);
    };
    auto tag = [&](size_t part) {
      return transport::Tag{ctx.comm, ctx.seq, ctx.first_step + static_cast<uint32_t>(s),
                            static_cast<uint32_t>(part)};
    };
    auto chunk_of = [&](int block, size_t part) {
      return ChunkOf({static_cast<size_t>(block) * count, count}, chunk_elements, part);
    };
    size_t sent = 0;
    auto send_next = [&]() -> absl::Status {
      if (sent == chunks) return absl::OkStatus();
      const transport::ByteSpan bytes =
          internal::BytesOf(send_data, element_size, chunk_of(to, sent));
      const absl::Status status = ctx.endpoint->Send(to_address, tag(sent), bytes, ctx.deadline);
      ++sent;
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, where(), "sending to", to_address);
      }
      return absl::OkStatus();
    };
    BATON_RETURN_IF_ERROR(send_next());
    for (size_t part = 0; part < chunks; ++part) {
      BATON_RETURN_IF_ERROR(send_next());
      const transport::ByteSpan into = internal::BytesOf(recv, element_size, chunk_of(from, part));
      const absl::Status status = ctx.endpoint->Recv(from_address, tag(part), into, ctx.deadline);
      if (!status.ok()) {
        return internal::AnnotateTransportError(status, where(), "receiving from", from_address);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
