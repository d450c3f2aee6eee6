#pragma once

// The cases of device_collectives_check and their CPU reference: what every rank of a world
// uploads for a case and what its receive buffer must hold afterwards, bit for bit, computed from
// the case alone (every rank can compute every rank's input, a hash of the case, rank and index).
//
// Reductions draw values whose every partial result is exact in the type, so that any order of
// reduction (ring, tree, one pass over all inputs, float32 accumulation of narrow types) gives the
// same bits: floating-point values are n * 2^-f with |n| small enough that sums stay within the
// type's exact-integer range, products are of +-2^k, and for avg with a world size that is not a
// power of two the sum is a multiple of the world size. Integer sums and products wrap (two's
// complement, as device/reduce.h specifies); integer avg inputs do not overflow and the
// quotient truncates. Data-moving collectives move arbitrary bits (NaN patterns included).
//
// Everything here is a pure function of its arguments; world sizes from 1 to kMaxRanks.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baton/baton.h"

namespace baton::device_check {

// The exact-value patterns hold for world sizes up to this.
inline constexpr int kMaxRanks = 8;
// Bytes after every receive region that the call must leave as they were (checked).
inline constexpr size_t kGuardBytes = 256;

// ---- Element types

enum class Family { kSigned, kUnsigned, kFloat };

struct TypeInfo {
  baton_dtype_t type;
  size_t size;
  Family family;
  int exponent_bits = 0;     // floating-point types
  int mantissa_bits = 0;     // stored bits, without the implicit one
  bool has_infinity = true;  // false for fp8 e4m3 (its top exponent is normal, save for NaN)
  int64_t exact_bound = 0;   // every integer of magnitude <= this is exact in the type
  int fraction_bits = 0;     // drawn floating-point values are n * 2^-fraction_bits
};

// Every baton_dtype_t, indexed by its value.
const std::vector<TypeInfo>& Types();
const TypeInfo& Info(baton_dtype_t type);

// The bits of `v` in floating-point type `t`, or nullopt when `v` is not exactly representable.
std::optional<uint64_t> EncodeFloat(const TypeInfo& t, double v);

// An element for messages: its bits in hex and its value ("0x3c00 (1)", "0x7f (nan)").
std::string Describe(const TypeInfo& t, uint64_t bits);

// ---- Cases

// What a report line counts: a collective, or its in-place form.
enum class Check {
  kAllReduce,
  kAllReduceInPlace,  // send == recv
  kReduceScatter,
  kReduceScatterInPlace,  // send == recv: the result lands in the first block of the send data
  kAllGather,
  kAllGatherInPlace,  // NCCL's: send is this rank's block of recv
  kBroadcast,
  kReduce,
  kAllToAll,
  kAllToAllV,
  kGather,
  kScatter,
  kSendRecv,  // a ring: every rank sends to rank + 1, then receives from rank - 1
  kBarrier,
};
inline constexpr int kChecks = static_cast<int>(Check::kBarrier) + 1;

// "all_reduce", "all_gather (in place)", "send/recv", ...
const char* CheckName(Check check);
// Whether the check reduces (takes a reduce op).
bool Reduces(Check check);

struct Case {
  Check check = Check::kBarrier;
  baton_dtype_t type = BATON_UINT8;
  baton_reduce_op_t op = BATON_SUM;  // reductions only
  size_t count = 0;  // as the call counts elements (per block for reduce_scatter, all_to_all,
                     // scatter; the base of the per-pair counts for all_to_all_v)
  int root = 0;      // broadcast, reduce, gather, scatter
  uint64_t seed = 0;
};

// Every case for a world of `world` ranks, in the order every rank runs them: each dtype with
// each reduce op at counts 1, 3 and 4099 (in place at 3 and 4099), each data-moving collective
// at the same counts, and at >= large_bytes per rank every dtype once per reduction (one op,
// rotating) and one dtype per element size per data-moving collective; barriers.
std::vector<Case> Plan(int world, size_t large_bytes);

// all_to_all_v's arguments for `rank`: counts vary by pair (some are 0), with a gap of one
// element before each send block and two before each receive block.
struct VLayout {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  size_t send_elements = 0, recv_elements = 0;  // the spans
};
VLayout MakeVLayout(int world, int rank, size_t base);

// Elements of `rank`'s send buffer and of its receive buffer (in place: both are the one buffer).
std::pair<size_t, size_t> Extent(const Case& c, int world, int rank);

// The bits of element `index` of `rank`'s send buffer.
uint64_t InputBits(const Case& c, int world, int rank, size_t index);
// The bits of the case's reduce op over every rank's element `index` (reductions only).
uint64_t ReducedBits(const Case& c, int world, size_t index);

// What one rank uploads for a case, and what its receive buffer must hold afterwards.
struct Images {
  std::vector<uint8_t> send;      // the send buffer; empty in place
  std::vector<uint8_t> recv;      // the receive buffer and its guard before the call: a sentinel,
                                  // holding the input in place
  std::vector<uint8_t> expected;  // the same bytes after the call
  size_t send_offset = 0;         // in place: where the send data starts in the receive buffer
  size_t ignore_from = 0, ignore_to = 0;  // bytes of `expected` the call may leave as it likes
  VLayout v;                              // all_to_all_v only
};
Images MakeImages(const Case& c, int world, int rank);

}  // namespace baton::device_check
