#pragma once

// What the collective tests share: N participants as threads, each with its own endpoint on one
// in-memory fabric; inputs that make every reduction exact in its type (so that results can be
// compared bit for bit whatever order an algorithm combines them in); a serial reference; the
// sweep of world sizes x counts x types; and an endpoint that dies after a number of sends.
//
// Inputs: integers are random bits (sums and products wrap, which is exact); float sums use
// small integers whose sums stay within the type's exactly representable integers; products use
// +/-1 and +/-2 (and 0); min and max are exact anyway. Operations that only move data get random
// bits in every type (moving bytes is exact, NaN payloads included).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collective/data_type.h"
#include "collective/op_context.h"
#include "device/half.h"
#include "device/reduce.h"
#include "transport/forwarding_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/transport.h"

namespace baton::collective::test {

inline std::string Address(int rank) { return "rank" + std::to_string(rank); }

inline Ring RingOf(int rank, int size) {
  return {rank, size, Address((rank + size - 1) % size), Address((rank + 1) % size)};
}

inline Participants ParticipantsOf(int rank, int size) {
  Participants participants{rank, {}};
  for (int r = 0; r < size; ++r) participants.addresses.push_back(Address(r));
  return participants;
}

// N endpoints on one fabric, alive until the group is destroyed (after every participant has
// returned: a closed endpoint would look like a lost peer to the others).
class Group {
 public:
  explicit Group(int size) : fabric_(transport::NewInMemoryFabric()) {
    for (int r = 0; r < size; ++r) {
      auto endpoint = fabric_->CreateEndpoint(Address(r));
      EXPECT_TRUE(endpoint.ok()) << endpoint.status();
      endpoints_.push_back(std::move(endpoint).value());
    }
  }
  ~Group() { endpoints_.clear(); }

  int size() const { return static_cast<int>(endpoints_.size()); }
  transport::InMemoryFabric& fabric() { return *fabric_; }
  transport::Endpoint* endpoint(int rank) { return endpoints_[rank].get(); }

  // Runs `body(rank, ctx)` on a thread per participant at once, ctx.endpoint set to the
  // participant's endpoint (or endpoints[rank] when given), and returns each one's status.
  std::vector<absl::Status> Run(const OpContext& ctx,
                                const std::function<absl::Status(int, const OpContext&)>& body,
                                const std::vector<transport::Endpoint*>& endpoints = {}) {
    std::vector<absl::Status> statuses(size());
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back([&, r] {
        OpContext own = ctx;
        own.endpoint = endpoints.empty() ? endpoint(r) : endpoints[r];
        statuses[r] = body(r, own);
      });
    }
    for (std::thread& t : threads) t.join();
    return statuses;
  }

  // Payload plus framing bytes that participant `rank` has transmitted, in all and to `peer`.
  uint64_t TxBytes(int rank) {
    uint64_t total = 0;
    for (const transport::LinkStats& link : endpoint(rank)->Stats()) total += link.tx_bytes;
    return total;
  }
  uint64_t TxBytesTo(int rank, int peer) {
    for (const transport::LinkStats& link : endpoint(rank)->Stats()) {
      if (link.peer == Address(peer)) return link.tx_bytes;
    }
    return 0;
  }

 private:
  std::unique_ptr<transport::InMemoryFabric> fabric_;
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints_;
};

inline OpContext TestContext(uint64_t seq, absl::Duration timeout) {
  OpContext ctx;
  ctx.comm = 7;
  ctx.seq = seq;
  ctx.deadline = absl::Now() + timeout;
  return ctx;
}

// ---- Inputs and the serial reference ----

inline constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kBfloat16,
    DataType::kFloat32, DataType::kFloat64, DataType::kFp8E4M3, DataType::kFp8E5M2};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                       ReduceOp::kMax};

inline uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline bool IsFloat(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBfloat16 || type == DataType::kFloat32 ||
         type == DataType::kFloat64 || type == DataType::kFp8E4M3 || type == DataType::kFp8E5M2;
}

// The largest integer up to which every integer is representable in a float type.
inline double ExactIntegerLimit(DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return 2048;
    case DataType::kBfloat16:
      return 256;
    case DataType::kFp8E4M3:
      return 16;
    case DataType::kFp8E5M2:
      return 8;
    case DataType::kFloat32:
      return 1 << 24;
    default:
      return 1LL << 53;
  }
}

inline void StoreFloat(DataType type, double value, std::byte* out) {
  auto put = [out](auto v) { std::memcpy(out, &v, sizeof(v)); };
  const auto f = static_cast<float>(value);
  switch (type) {
    case DataType::kFloat16:
      return put(device::FloatToHalf(f));
    case DataType::kBfloat16:
      return put(device::FloatToBfloat16(f));
    case DataType::kFp8E4M3:
      return put(device::FloatToFp8E4M3(f));
    case DataType::kFp8E5M2:
      return put(device::FloatToFp8E5M2(f));
    case DataType::kFloat32:
      return put(f);
    default:
      return put(value);
  }
}

// Random bytes, different for every (salt, rank).
inline std::vector<std::byte> RandomBytes(size_t bytes, int rank, uint64_t salt) {
  std::vector<std::byte> buffer(bytes);
  const uint64_t seed = Mix(salt ^ static_cast<uint64_t>(rank) << 48);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t bits = Mix(seed + i);
    std::memcpy(buffer.data() + i, &bits, std::min<size_t>(8, bytes - i));
  }
  return buffer;
}

// Participant `rank`'s input of `count` elements for a reduction (see the top of the file).
inline std::vector<std::byte> ReduceInput(DataType type, ReduceOp op, int world_size, int rank,
                                          size_t count) {
  const size_t element = DataTypeSize(type);
  if (!IsFloat(type)) {
    return RandomBytes(count * element, rank,
                       static_cast<uint64_t>(type) << 40 ^ static_cast<uint64_t>(op) << 32);
  }
  std::vector<std::byte> buffer(count * element);
  const uint64_t seed = Mix(static_cast<uint64_t>(rank) << 48 ^ static_cast<uint64_t>(type) << 40 ^
                            static_cast<uint64_t>(op) << 32);
  const auto bound = static_cast<int64_t>(ExactIntegerLimit(type)) / world_size;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = Mix(seed + i);
    double value;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        value = static_cast<double>(static_cast<int64_t>(bits % (2 * bound + 1)) - bound);
        break;
      case ReduceOp::kProd: {
        constexpr double kFactors[] = {1, -1, 2, -2, 1, -1, 2, -2, 1, -1, 2, -2, 1, -1, 2, 0};
        value = kFactors[bits % 16];
        break;
      }
      default:
        value = static_cast<double>(static_cast<int64_t>(bits % 20001) - 10000) / 8;
    }
    StoreFloat(type, value, buffer.data() + i * element);
  }
  return buffer;
}

// Every participant's input (ReduceInput), in participant order.
inline std::vector<std::vector<std::byte>> ReduceInputs(DataType type, ReduceOp op, int world_size,
                                                        size_t count) {
  std::vector<std::vector<std::byte>> inputs;
  for (int r = 0; r < world_size; ++r)
    inputs.push_back(ReduceInput(type, op, world_size, r, count));
  return inputs;
}

// op over the inputs in participant order.
inline std::vector<std::byte> SerialReference(const std::vector<std::vector<std::byte>>& inputs,
                                              size_t count, DataType type, ReduceOp op) {
  std::vector<std::byte> result = inputs[0];
  for (size_t r = 1; r < inputs.size(); ++r) {
    device::ReduceInto(type, op, result.data(), inputs[r].data(), count);
  }
  return result;
}

// Index of the first element where a and b differ, or -1.
inline int64_t FirstDifference(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                               size_t element) {
  if (a == b) return -1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i / element);
  }
  return static_cast<int64_t>(std::min(a.size(), b.size()) / element);
}

template <typename T>
std::vector<std::byte> AsBytes(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <typename T>
std::vector<T> FromBytes(const std::vector<std::byte>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// ---- The sweep: world sizes x counts x types (x ops x roots where they apply) ----

enum class CountKind { kZero, kOne, kFewerThanRanks, kOdd, kLarge };

inline constexpr int kWorldSizes[] = {1, 2, 3, 4, 7, 8};
inline constexpr CountKind kSmallCounts[] = {CountKind::kZero, CountKind::kOne,
                                             CountKind::kFewerThanRanks, CountKind::kOdd};

struct SweepCase {
  int size = 1;
  CountKind kind = CountKind::kZero;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // for reductions
  int root = 0;                  // for rooted collectives

  // `large` is the element count of the large case.
  size_t count(size_t large = (size_t{1} << 18) + 3) const {
    switch (kind) {
      case CountKind::kZero:
        return 0;
      case CountKind::kOne:
        return 1;
      case CountKind::kFewerThanRanks:
        return static_cast<size_t>(size - 1);
      case CountKind::kOdd:
        return 1001;
      case CountKind::kLarge:
        return large;
    }
    return 0;
  }

  // Small chunks for most cases, so that steps are cut into many chunks (and chunk sizes that
  // are not a whole number of elements get rounded down); the default for some large cases.
  size_t chunk_bytes() const {
    const size_t element = DataTypeSize(type);
    switch (kind) {
      case CountKind::kZero:
        return OpContext{}.chunk_bytes;
      case CountKind::kOne:
        return 0;  // less than an element: one element per chunk
      case CountKind::kFewerThanRanks:
        return 1;
      case CountKind::kOdd:
        return 7 * element + element / 2;
      case CountKind::kLarge:
        return element >= 4 ? (size_t{16} << 10) + 5 : OpContext{}.chunk_bytes;
    }
    return 0;
  }

  OpContext Context() const {
    OpContext ctx = TestContext(1, absl::Seconds(60));
    ctx.chunk_bytes = chunk_bytes();
    return ctx;
  }

  std::string Name(bool with_op, bool with_root) const {
    static constexpr const char* kKinds[] = {"zero", "one", "fewer", "odd", "large"};
    std::string name = "n" + std::to_string(size) + "_" + kKinds[static_cast<int>(kind)] + "_" +
                       std::string(DataTypeName(type));
    if (with_op) name += "_" + std::string(ReduceOpName(op));
    if (with_root) name += "_root" + std::to_string(root);
    return name;
  }
};

// Roots 0, last and middle, without repeats.
inline std::vector<int> RootsOf(int size) {
  std::vector<int> roots = {0};
  if (size > 1) roots.push_back(size - 1);
  if (size > 2) roots.push_back(size / 2);
  return roots;
}

// Every size x small count x type (x op when `reduces`) (x root when `rooted`), then the large
// count for `large_types` only.
inline std::vector<SweepCase> SweepCases(bool reduces, bool rooted,
                                         const std::vector<DataType>& large_types) {
  std::vector<SweepCase> cases;
  auto add = [&](int size, CountKind kind, DataType type) {
    const std::vector<ReduceOp> ops =
        reduces ? std::vector<ReduceOp>(std::begin(kAllOps), std::end(kAllOps))
                : std::vector<ReduceOp>{ReduceOp::kSum};
    const std::vector<int> roots = rooted ? RootsOf(size) : std::vector<int>{0};
    for (ReduceOp op : ops) {
      for (int root : roots) cases.push_back({size, kind, type, op, root});
    }
  };
  for (int size : kWorldSizes) {
    for (CountKind kind : kSmallCounts) {
      for (DataType type : kAllTypes) add(size, kind, type);
    }
    for (DataType type : large_types) add(size, CountKind::kLarge, type);
  }
  return cases;
}

// ---- Failures ----

// The shared wrapper base: a test endpoint overrides only what it changes.
using transport::ForwardingEndpoint;

// Forwards to a real endpoint and kills it (through the fabric, as if its process died) right
// after its `kill_after`-th send, or before its first operation when kill_after is 0.
class DyingEndpoint final : public ForwardingEndpoint {
 public:
  DyingEndpoint(transport::Endpoint* inner, transport::InMemoryFabric* fabric, int kill_after)
      : ForwardingEndpoint(inner), fabric_(fabric), kill_after_(kill_after) {
    if (kill_after_ == 0) fabric_->Kill(inner->address());
  }

  // Whether it has been killed, and how many sends it attempted after that.
  bool killed() const { return sends_.load() >= kill_after_; }
  int sends_after_death() const { return std::max(0, sends_.load() - kill_after_); }

  absl::Status Send(const std::string& peer, const transport::Tag& tag,
                    transport::ConstByteSpan data, absl::Time deadline) override {
    absl::Status status = inner()->Send(peer, tag, data, deadline);
    if (++sends_ == kill_after_) fabric_->Kill(inner()->address());
    return status;
  }

 private:
  transport::InMemoryFabric* const fabric_;
  const int kill_after_;
  std::atomic<int> sends_{0};
};

}  // namespace baton::collective::test
