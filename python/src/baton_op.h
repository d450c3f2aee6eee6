#pragma once

// The operation both extensions hand to baton_submit (`_C`'s communicator, `_c10d`'s backend).

#include <cstddef>

#include "baton/baton.h"

namespace baton::python_ops {

// An operation of `collective` on this rank's buffers, its other fields at their defaults
// (baton_op_init); the caller adds root, peer, reduce op or all_to_all_v's arrays.
inline baton_op_t MakeOp(baton_collective_t collective, const void* send, void* recv, size_t count,
                         baton_dtype_t type) {
  baton_op_t op;
  baton_op_init(&op);
  op.collective = collective;
  op.send = send;
  op.recv = recv;
  op.count = count;
  op.type = type;
  return op;
}

}  // namespace baton::python_ops
