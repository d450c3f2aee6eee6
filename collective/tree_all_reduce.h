#pragma once

// Tree all-reduce over NCCL's double binary tree (double_binary_tree.h), or two trees the caller
// supplies (the same trees over another numbering, say): the buffer is split in two halves
// (SegmentOf(count, 2, 0) and SegmentOf(count, 2, 1)); tree t reduces half t up to its root and
// broadcasts the result back down. Both halves and both directions are pipelined in chunks, so
// every link carries chunks at once; since no participant is interior in both trees, the reduction
// work is spread evenly. Latency grows with log(size) rather than size, which suits small messages
// and many participants; the ring suits large ones.
//
// Buffers: one buffer of `count` elements per participant, reduced in place: on return every
// participant holds op(every participant's data). The order in which contributions are combined
// follows the trees (different per half); for floating point that is not rank order.
//
// Traffic: with H_t = |half t| * element size, C_t = ChunkCount(|half t|, ChunkElements(
// ctx.chunk_bytes, type)), links_t(r) = (r is not tree t's root) + (number of r's children in
// tree t) and h the transport's per-message overhead (LinkStats, transport.h; 40 bytes on TCP),
// participant r transmits
//   sum over t in {0, 1} of links_t(r) * (H_t + h * C_t)
// (each half once up to its parent and once down to each child). Every tree has size-1 edges, so
// in all 2(size-1) * D bytes of payload for D = count * element size, the same as the ring:
// 2(size-1)/size * D per participant on average.
//
// Tags: step t = tree t's reduction (child to parent), step 2+t = tree t's broadcast (parent to
// child); part = chunk within the half.

#include <array>
#include <cstddef>

#include "absl/status/status.h"
#include "collective/data_type.h"
#include "collective/double_binary_tree.h"
#include "collective/op_context.h"

namespace baton::collective {

// Every participant calls it with the same count, type, op and sequence number, and the same
// participant list. ReduceOp::kAvg is reduced as a sum; the caller divides once at the end
// (ctx.kernels->Divide). Errors: InvalidArgument for a rank outside the participants, a
// missing address, an unknown type or op, or a byte count that overflows; transport errors
// annotated with this rank, the tree, the phase and chunk, and the peer (on error `data` is left
// partly reduced).
absl::Status TreeAllReduce(const OpContext& ctx, const Participants& participants, void* data,
                           size_t count, DataType type, ReduceOp op);

// The same over two caller-supplied trees instead of DoubleBinaryTree(size, rank): trees[t] is
// this participant's parent and children in tree t, as indices into participants.addresses
// (batond's trees over its daemons, for instance). Every participant must pass its links in the
// same two trees, each spanning all participants; links that disagree between participants make the
// operation fail at ctx.deadline, never hang. Any shape works; the pipeline is tuned for depths up
// to bit_width(size-1) + 1. InvalidArgument for a link outside the participants or to itself.
absl::Status TreeAllReduce(const OpContext& ctx, const Participants& participants,
                           const std::array<TreeNode, 2>& trees, void* data, size_t count,
                           DataType type, ReduceOp op);

}  // namespace baton::collective
