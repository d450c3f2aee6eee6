#include "collective/tree_all_reduce.h"

#include <algorithm>
#include <array>
#include <bit>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/double_binary_tree.h"
#include "collective/op_checks.h"
#include "collective/registered_memory.h"
#include "collective/segments.h"
#include "common/status_macros.h"

// One thread drives both trees and both directions in rounds. In round i a participant reduces
// chunk i of each half (receives it from its children, folds it into its own copy, sends it to
// its parent; a root, which then has the final chunk, sends it straight down to its children),
// and then takes part in broadcasting chunk i - lag (receives it from its parent and forwards it
// to its children).
//
// No deadlock: a receive in round i waits only for a send in the same round by a child (one
// level further from the leaves) or a parent (one level nearer the root), or for a root's send in
// an earlier round, and sends never wait for the receiver (the transport holds early messages).
//
// The lag lets the reduction run ahead of the broadcast: while chunk j travels up to the root
// and back down (up to 2 * depth hops), a participant goes on reducing later chunks instead of
// waiting for it, so a lag of twice the depth keeps the pipeline full (we assume a balanced tree:
// depth bit_width(size-1) + 1 at most, one more than the double binary tree's). It also bounds what
// a participant receives before asking for it: apart from the first `lag` rounds, which need
// nothing from above, every round needs a same-round send from each neighbour, so neighbours stay
// within about a round of each other and a link holds at most about lag + 1 unasked chunks.

namespace baton::collective {
namespace {

constexpr absl::string_view kWhat = "tree all-reduce";

class TreeOperation {
 public:
  TreeOperation(const OpContext& ctx, const Participants& participants,
                const std::array<TreeNode, 2>& trees, void* data, size_t count, DataType type,
                ReduceOp op)
      : ctx_(ctx),
        participants_(participants),
        data_(data),
        type_(type),
        op_(op),
        element_size_(DataTypeSize(type)),
        chunk_elements_(ChunkElements(ctx.chunk_bytes, type)),
        trees_(trees) {
    for (int t = 0; t < 2; ++t) {
      halves_[t] = SegmentOf(count, 2, t);
      chunks_[t] = ChunkCount(halves_[t].length, chunk_elements_);
    }
  }

  absl::Status Run() {
    const size_t scratch_elements = std::min(chunk_elements_, halves_[0].length);
    scratch_ = TakeScratch(ctx_, scratch_elements * element_size_);
    // At least the double binary tree's depth, plus one for other balanced trees a caller passes.
    const int depth =
        static_cast<int>(std::bit_width(static_cast<unsigned>(participants_.size() - 1))) + 1;
    const size_t lag = 2 * static_cast<size_t>(depth);
    const size_t rounds = std::max(chunks_[0], chunks_[1]) + lag;
    for (size_t i = 0; i < rounds; ++i) {
      for (int t = 0; t < 2; ++t) {
        if (i < chunks_[t]) BATON_RETURN_IF_ERROR(ReduceUp(t, i));
      }
      if (i < lag) continue;
      for (int t = 0; t < 2; ++t) {
        if (i - lag < chunks_[t] && trees_[t].parent != -1) {
          BATON_RETURN_IF_ERROR(BroadcastDown(t, i - lag));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status ReduceUp(int t, size_t part) {
    const ElementRange chunk = ChunkOf(halves_[t], chunk_elements_, part);
    const transport::ByteSpan own = internal::BytesOf(data_, element_size_, chunk);
    const transport::ByteSpan received(scratch_.data(), own.size());
    for (int child : trees_[t].children) {
      BATON_RETURN_IF_ERROR(Recv(t, /*down=*/false, part, child, received));
      PhaseTimer timer(ReduceSlot(ctx_));
      ctx_.kernels->ReduceInto(type_, op_, own.data(), received.data(), chunk.length);
    }
    if (trees_[t].parent == -1) return SendToChildren(t, part, own);
    return Send(t, /*down=*/false, part, trees_[t].parent, own);
  }

  absl::Status BroadcastDown(int t, size_t part) {
    const transport::ByteSpan own =
        internal::BytesOf(data_, element_size_, ChunkOf(halves_[t], chunk_elements_, part));
    BATON_RETURN_IF_ERROR(Recv(t, /*down=*/true, part, trees_[t].parent, own));
    return SendToChildren(t, part, own);
  }

  absl::Status SendToChildren(int t, size_t part, transport::ConstByteSpan bytes) {
    for (int child : trees_[t].children) {
      BATON_RETURN_IF_ERROR(Send(t, /*down=*/true, part, child, bytes));
    }
    return absl::OkStatus();
  }

  absl::Status Send(int t, bool down, size_t part, int peer, transport::ConstByteSpan bytes) {
    const std::string& address = participants_.addresses[peer];
    const absl::Status status =
        ctx_.endpoint->Send(address, Tag(t, down, part), bytes, ctx_.deadline);
    if (!status.ok()) {
      return internal::AnnotateTransportError(status, Where(t, down, part), "sending to", address);
    }
    return absl::OkStatus();
  }

  absl::Status Recv(int t, bool down, size_t part, int peer, transport::ByteSpan bytes) {
    const std::string& address = participants_.addresses[peer];
    const absl::Status status =
        ctx_.endpoint->Recv(address, Tag(t, down, part), bytes, ctx_.deadline);
    if (!status.ok()) {
      return internal::AnnotateTransportError(status, Where(t, down, part), "receiving from",
                                              address);
    }
    return absl::OkStatus();
  }

  transport::Tag Tag(int t, bool down, size_t part) const {
    return {ctx_.comm, ctx_.seq, ctx_.first_step + static_cast<uint32_t>((down ? 2 : 0) + t),
            static_cast<uint32_t>(part)};
  }

  std::string Where(int t, bool down, size_t part) const {
    return absl::StrCat("tree all-reduce rank ", participants_.rank, "/", participants_.size(),
                        ", tree ", t, " ", down ? "broadcast" : "reduce", " chunk ", part + 1, "/",
                        chunks_[t]);
  }

  const OpContext& ctx_;
  const Participants& participants_;
  void* const data_;
  const DataType type_;
  const ReduceOp op_;
  const size_t element_size_;
  const size_t chunk_elements_;
  const std::array<TreeNode, 2>& trees_;
  std::array<ElementRange, 2> halves_;
  std::array<size_t, 2> chunks_;
  ScratchPool::Buffer scratch_;  // one chunk received from a child before folding it in
};

}  // namespace

absl::Status TreeAllReduce(const OpContext& ctx, const Participants& participants, void* data,
                           size_t count, DataType type, ReduceOp op) {
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, participants.rank, participants.size()));
  return TreeAllReduce(ctx, participants, DoubleBinaryTree(participants.size(), participants.rank),
                       data, count, type, op);
}

absl::Status TreeAllReduce(const OpContext& ctx, const Participants& participants,
                           const std::array<TreeNode, 2>& trees, void* data, size_t count,
                           DataType type, ReduceOp op) {
  const int n = participants.size();
  const int rank = participants.rank;
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, rank, n));
  for (int t = 0; t < 2; ++t) {
    std::vector<int> links = trees[t].children;
    if (trees[t].parent != -1) links.push_back(trees[t].parent);
    for (int peer : links) {
      if (peer < 0 || peer >= n || peer == rank) {
        return absl::InvalidArgumentError(absl::StrCat("tree all-reduce: rank ", rank,
                                                       " has a link to ", peer, " in tree ", t,
                                                       " (", n, " participants)"));
      }
    }
  }
  BATON_RETURN_IF_ERROR(internal::CheckElements(kWhat, type, count));
  BATON_RETURN_IF_ERROR(internal::CheckReduceOp(kWhat, op));
  if (n == 1 || count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckParticipantLinks(kWhat, ctx, participants));
  if (data == nullptr) return absl::InvalidArgumentError("tree all-reduce: needs a buffer");
  BATON_RETURN_IF_ERROR(internal::CheckChunkCount(kWhat, ctx, type, SegmentOf(count, 2, 0).length));
  return TreeOperation(ctx, participants, trees, data, count, type, op).Run();
}

}  // namespace baton::collective
