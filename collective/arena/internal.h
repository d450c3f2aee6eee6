#pragma once

// What the node arena's .cc files share (NodeArena spans node_arena.cc and collective/arena/):
// private to them, included by nothing else.

#include <cstddef>
#include <cstring>

#include "absl/time/time.h"

namespace baton::collective::arena {

// How long a waiter looks (yielding its core between looks) before it blocks on the bell:
// $BATON_ARENA_SPIN_US, else 20 us (docs/node-arena.md).
absl::Duration SpinLimit();
// The same for the other local ranks while local rank 0 runs the inter-node step, which takes a
// network round trip or more: $BATON_ARENA_ACROSS_SPIN_US, else 200 us.
absl::Duration AcrossSpinLimit();

// An operation's fill of its input slot: `bytes` of `send` unless it is null.
inline auto CopyIn(const void* send, size_t bytes) {
  return [send, bytes](std::byte* slot) {
    if (send != nullptr && bytes > 0) std::memcpy(slot, send, bytes);
  };
}

// A local phase's delivery: `bytes` of the node's result from `from` to `recv` unless it is null.
inline auto CopyOut(void* recv, size_t from, size_t bytes) {
  return [recv, from, bytes](const std::byte* buffer) {
    if (recv != nullptr && bytes > 0) std::memcpy(recv, buffer + from, bytes);
  };
}

}  // namespace baton::collective::arena
