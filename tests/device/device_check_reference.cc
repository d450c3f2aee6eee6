#include "tests/device/device_check_reference.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace baton::device_check {
namespace {

uint64_t Mask(const TypeInfo& t) {
  return t.size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * t.size)) - 1;
}

int64_t SignExtend(uint64_t bits, const TypeInfo& t) {
  const int shift = 64 - 8 * static_cast<int>(t.size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

// Collectives whose count is per block of world-size blocks in the send buffer.
bool Blocked(Check check) {
  return check == Check::kReduceScatter || check == Check::kReduceScatterInPlace ||
         check == Check::kAllToAll || check == Check::kScatter || check == Check::kAllToAllV;
}

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Hash(uint64_t seed, uint64_t rank, uint64_t index) {
  return Mix(seed ^ Mix(rank * 0x100000001b3ULL ^ Mix(index)));
}

// all_to_all_v: how many elements rank `from` sends rank `to` (some 0), and where blocks lie: a
// gap of one element before each send block and two before each receive block.
size_t VCount(int from, int to, size_t base) {
  return (base + 3 * static_cast<size_t>(from) + 5 * static_cast<size_t>(to)) % (base + 2);
}
// A uniformly drawn integer in [-bound, bound].
int64_t Uniform(uint64_t h, int64_t bound) {
  // In unsigned arithmetic, which wraps, so that a bound near INT64_MAX cannot overflow.
  const auto span = static_cast<uint64_t>(bound);
  return static_cast<int64_t>(h % (2 * span + 1) - span);
}

bool PowerOfTwo(int n) { return (n & (n - 1)) == 0; }

// Element `index` of `rank`'s input to a floating-point reduction, chosen so that every partial
// result of any reduction order is exact in the type.
double FloatInput(const Case& c, const TypeInfo& t, int world, int rank, size_t index) {
  const uint64_t h = Hash(c.seed, static_cast<uint64_t>(rank), index);
  const int64_t bound = t.exact_bound;
  int64_t n = 0;
  switch (c.op) {
    case BATON_PROD: {  // +-2^k, k in {-1, 0, 1}: products of 8 stay within every type's range
      const double v = std::ldexp(1.0, static_cast<int>(h % 3) - 1);
      return ((h >> 20) & 1) != 0 ? -v : v;
    }
    case BATON_MIN:
    case BATON_MAX:
      n = Uniform(h, bound);
      break;
    case BATON_AVG:
      if (!PowerOfTwo(world)) {
        // Every rank holds m, rank 0 adds d and rank 1 subtracts it: the sum is world * m, whose
        // quotient by world is exact.
        const int64_t m = Uniform(Hash(c.seed, ~uint64_t{0}, index), bound / (int64_t{2} * world));
        const int64_t d = Uniform(Hash(c.seed, ~uint64_t{1}, index), bound / 2);
        n = m + (rank == 0 ? d : rank == 1 ? -d : 0);
        break;
      }
      [[fallthrough]];  // a power-of-two divisor is exact
    case BATON_SUM:
      n = Uniform(h, bound / world);
      break;
  }
  return std::ldexp(static_cast<double>(n), -t.fraction_bits);
}

// The same for integer reductions: any bits (sums and products wrap), but avg without overflow.
uint64_t IntegerInput(const Case& c, const TypeInfo& t, int world, int rank, size_t index) {
  const uint64_t h = Hash(c.seed, static_cast<uint64_t>(rank), index);
  if (c.op != BATON_AVG) return h & Mask(t);
  if (t.family == Family::kUnsigned) {
    const uint64_t max = Mask(t) / static_cast<uint64_t>(world);
    return max == ~uint64_t{0} ? h : h % (max + 1);
  }
  const auto max = static_cast<int64_t>(Mask(t) >> 1);
  return static_cast<uint64_t>(Uniform(h, max / world)) & Mask(t);
}

void Put(std::vector<uint8_t>& image, size_t element, size_t size, uint64_t bits) {
  std::memcpy(image.data() + element * size, &bits, size);  // little-endian, as the devices
}

// Bytes a buffer holds where nothing may be written: different for every byte and case.
void FillSentinel(std::vector<uint8_t>& image, size_t from, uint64_t seed) {
  for (size_t i = from; i < image.size(); ++i) {
    image[i] = static_cast<uint8_t>(Mix(seed + i / 8) >> (8 * (i % 8)));
  }
}

}  // namespace

const std::vector<TypeInfo>& Types() {
  static const std::vector<TypeInfo> types = {
      {BATON_INT8, 1, Family::kSigned},
      {BATON_UINT8, 1, Family::kUnsigned},
      {BATON_INT32, 4, Family::kSigned},
      {BATON_UINT32, 4, Family::kUnsigned},
      {BATON_INT64, 8, Family::kSigned},
      {BATON_UINT64, 8, Family::kUnsigned},
      {BATON_FLOAT16, 2, Family::kFloat, 5, 10, true, 2048, 2},
      {BATON_BFLOAT16, 2, Family::kFloat, 8, 7, true, 256, 2},
      {BATON_FLOAT32, 4, Family::kFloat, 8, 23, true, int64_t{1} << 24, 2},
      {BATON_FLOAT64, 8, Family::kFloat, 11, 52, true, int64_t{1} << 53, 2},
      {BATON_FP8_E4M3, 1, Family::kFloat, 4, 3, false, 16, 1},
      {BATON_FP8_E5M2, 1, Family::kFloat, 5, 2, true, 8, 1},
  };
  return types;
}

const TypeInfo& Info(baton_dtype_t type) { return Types()[static_cast<size_t>(type)]; }

std::optional<uint64_t> EncodeFloat(const TypeInfo& t, double v) {
  if (t.type == BATON_FLOAT64) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits;
  }
  if (t.type == BATON_FLOAT32) {
    const auto f = static_cast<float>(v);
    if (static_cast<double>(f) != v) return std::nullopt;
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return bits;
  }
  const int e_bits = t.exponent_bits;
  const int m_bits = t.mantissa_bits;
  const int bias = (1 << (e_bits - 1)) - 1;
  const uint64_t sign = std::signbit(v) ? uint64_t{1} << (e_bits + m_bits) : 0;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int exponent = e - 1;
  double significand;
  uint64_t field;
  if (exponent < 1 - bias) {  // subnormal
    significand = std::ldexp(a, m_bits - (1 - bias));
    field = 0;
  } else {
    significand = std::ldexp(a, m_bits - exponent) - std::ldexp(1.0, m_bits);
    const int biased = exponent + bias;
    field = static_cast<uint64_t>(biased);
  }
  const uint64_t top = (uint64_t{1} << e_bits) - 1;
  const uint64_t mantissa_max = (uint64_t{1} << m_bits) - 1;
  if (significand != std::floor(significand) || significand < 0 ||
      significand > static_cast<double>(mantissa_max)) {
    return std::nullopt;
  }
  const auto mantissa = static_cast<uint64_t>(significand);
  if (field > top || (t.has_infinity && field == top) ||
      (!t.has_infinity && field == top && mantissa == mantissa_max)) {
    return std::nullopt;
  }
  return sign | (field << m_bits) | mantissa;
}

std::string Describe(const TypeInfo& t, uint64_t bits) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%0*llx", static_cast<int>(2 * t.size),
                static_cast<unsigned long long>(bits));
  if (t.family == Family::kSigned) return absl::StrCat(hex, " (", SignExtend(bits, t), ")");
  if (t.family == Family::kUnsigned) return absl::StrCat(hex, " (", bits, ")");
  double v;
  if (t.type == BATON_FLOAT64) {
    std::memcpy(&v, &bits, sizeof v);
  } else if (t.type == BATON_FLOAT32) {
    float f;
    const auto b32 = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b32, sizeof f);
    v = f;
  } else {
    const int m_bits = t.mantissa_bits;
    const int bias = (1 << (t.exponent_bits - 1)) - 1;
    const uint64_t field = (bits >> m_bits) & ((uint64_t{1} << t.exponent_bits) - 1);
    const uint64_t mantissa = bits & ((uint64_t{1} << m_bits) - 1);
    const bool negative = ((bits >> (t.exponent_bits + m_bits)) & 1) != 0;
    const uint64_t top = (uint64_t{1} << t.exponent_bits) - 1;
    if (field == top && (t.has_infinity || mantissa == (uint64_t{1} << m_bits) - 1)) {
      v = t.has_infinity && mantissa == 0 ? INFINITY : NAN;
    } else if (field == 0) {
      v = std::ldexp(static_cast<double>(mantissa), 1 - bias - m_bits);
    } else {
      v = std::ldexp(static_cast<double>(mantissa + (uint64_t{1} << m_bits)),
                     static_cast<int>(field) - bias - m_bits);
    }
    if (negative) v = -v;
  }
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", v);
  return absl::StrCat(hex, " (", number, ")");
}

const char* CheckName(Check check) {
  static const char* const names[kChecks] = {"all_reduce",     "all_reduce (in place)",
                                             "reduce_scatter", "reduce_scatter (in place)",
                                             "all_gather",     "all_gather (in place)",
                                             "broadcast",      "reduce",
                                             "all_to_all",     "all_to_all_v",
                                             "gather",         "scatter",
                                             "send/recv",      "barrier"};
  return names[static_cast<int>(check)];
}

bool Reduces(Check check) {
  return check == Check::kAllReduce || check == Check::kAllReduceInPlace ||
         check == Check::kReduceScatter || check == Check::kReduceScatterInPlace ||
         check == Check::kReduce;
}

// Every case, in the order every rank runs them (with both modes and both memories).
std::vector<Case> Plan(int world, size_t large_bytes) {
  static constexpr baton_reduce_op_t kOps[] = {BATON_SUM, BATON_PROD, BATON_MIN, BATON_MAX,
                                               BATON_AVG};
  static constexpr size_t kCounts[] = {1, 3, 4099};
  std::vector<Case> plan;
  auto add = [&](Check check, baton_dtype_t type, baton_reduce_op_t op, size_t count) {
    Case c;
    c.check = check;
    c.type = type;
    c.op = op;
    c.count = count;
    c.root = static_cast<int>(plan.size() % static_cast<size_t>(world));
    c.seed = Mix(plan.size() * 7919 + static_cast<uint64_t>(world));
    plan.push_back(c);
  };
  auto large = [&](Check check, const TypeInfo& t) {
    const size_t elements = large_bytes / t.size;
    return (Blocked(check) ? elements / static_cast<size_t>(world) : elements) + 1;
  };
  add(Check::kBarrier, BATON_UINT8, BATON_SUM, 0);
  for (const TypeInfo& t : Types()) {
    for (baton_reduce_op_t op : kOps) {
      for (size_t count : kCounts) {
        for (Check check : {Check::kAllReduce, Check::kReduceScatter, Check::kReduce}) {
          add(check, t.type, op, count);
        }
      }
      for (size_t count : {size_t{3}, size_t{4099}}) {
        add(Check::kAllReduceInPlace, t.type, op, count);
        add(Check::kReduceScatterInPlace, t.type, op, count);
      }
    }
    // At >= large_bytes, every type with one op (each op gets its turn across the types).
    const baton_reduce_op_t op = kOps[static_cast<size_t>(t.type) % std::size(kOps)];
    for (Check check : {Check::kAllReduce, Check::kReduceScatter, Check::kReduce}) {
      add(check, t.type, op, large(check, t));
    }
    static constexpr Check kMovers[] = {
        Check::kAllGather, Check::kAllGatherInPlace, Check::kBroadcast, Check::kAllToAll,
        Check::kAllToAllV, Check::kGather,           Check::kScatter,   Check::kSendRecv};
    for (Check check : kMovers) {
      for (size_t count : kCounts) add(check, t.type, BATON_SUM, count);
    }
    // Moving bytes depends on the element size only: one large case per size.
    if (t.type == BATON_FP8_E4M3 || t.type == BATON_BFLOAT16 || t.type == BATON_INT32 ||
        t.type == BATON_FLOAT64) {
      for (Check check : kMovers) add(check, t.type, BATON_SUM, large(check, t));
    }
  }
  add(Check::kBarrier, BATON_UINT8, BATON_SUM, 0);
  add(Check::kBarrier, BATON_UINT8, BATON_SUM, 0);
  return plan;
}

VLayout MakeVLayout(int world, int rank, size_t base) {
  VLayout v;
  for (int j = 0; j < world; ++j) {
    v.send_counts.push_back(VCount(rank, j, base));
    v.send_displs.push_back(v.send_elements + 1);
    v.send_elements += 1 + v.send_counts.back();
    v.recv_counts.push_back(VCount(j, rank, base));
    v.recv_displs.push_back(v.recv_elements + 2);
    v.recv_elements += 2 + v.recv_counts.back();
  }
  return v;
}

std::pair<size_t, size_t> Extent(const Case& c, int world, int rank) {
  const auto w = static_cast<size_t>(world);
  switch (c.check) {
    case Check::kAllReduce:
    case Check::kAllReduceInPlace:
    case Check::kBroadcast:
    case Check::kReduce:
    case Check::kSendRecv:
      return {c.count, c.count};
    case Check::kReduceScatter:
    case Check::kScatter:
      return {c.count * w, c.count};
    case Check::kReduceScatterInPlace:
    case Check::kAllToAll:
      return {c.count * w, c.count * w};
    case Check::kAllGather:
    case Check::kAllGatherInPlace:
    case Check::kGather:
      return {c.count, c.count * w};
    case Check::kAllToAllV: {
      const VLayout v = MakeVLayout(world, rank, c.count);
      return {v.send_elements, v.recv_elements};
    }
    case Check::kBarrier:
      return {0, 0};
  }
  return {0, 0};
}

uint64_t InputBits(const Case& c, int world, int rank, size_t index) {
  const TypeInfo& t = Info(c.type);
  if (!Reduces(c.check)) return Hash(c.seed, static_cast<uint64_t>(rank), index) & Mask(t);
  if (t.family != Family::kFloat) return IntegerInput(c, t, world, rank, index);
  const std::optional<uint64_t> bits = EncodeFloat(t, FloatInput(c, t, world, rank, index));
  if (!bits) {
    std::fprintf(stderr,
                 "device_check_reference: input %.17g of dtype %d, op %d, world %d is not exact "
                 "(a bug of the check)\n",
                 FloatInput(c, t, world, rank, index), static_cast<int>(c.type),
                 static_cast<int>(c.op), world);
    std::abort();
  }
  return *bits;
}

uint64_t ReducedBits(const Case& c, int world, size_t index) {
  const TypeInfo& t = Info(c.type);
  if (t.family != Family::kFloat) {
    const bool is_signed = t.family == Family::kSigned;
    uint64_t acc = IntegerInput(c, t, world, 0, index);
    int64_t signed_sum = SignExtend(acc, t);
    for (int r = 1; r < world; ++r) {
      const uint64_t x = IntegerInput(c, t, world, r, index);
      switch (c.op) {
        case BATON_SUM:
        case BATON_AVG:
          acc += x;
          // Wrapping like the kernels' integers (a plain signed += would be undefined there).
          signed_sum = static_cast<int64_t>(static_cast<uint64_t>(signed_sum) +
                                            static_cast<uint64_t>(SignExtend(x, t)));
          break;
        case BATON_PROD:
          acc *= x;
          break;
        case BATON_MIN:
          if (is_signed ? SignExtend(x, t) < SignExtend(acc, t) : x < acc) acc = x;
          break;
        case BATON_MAX:
          if (is_signed ? SignExtend(x, t) > SignExtend(acc, t) : x > acc) acc = x;
          break;
      }
    }
    if (c.op == BATON_AVG) {  // no overflow by construction; division truncates
      acc = is_signed ? static_cast<uint64_t>(signed_sum / world)
                      : acc / static_cast<uint64_t>(world);
    }
    return acc & Mask(t);
  }
  double acc = FloatInput(c, t, world, 0, index);
  for (int r = 1; r < world; ++r) {
    const double x = FloatInput(c, t, world, r, index);
    switch (c.op) {
      case BATON_SUM:
      case BATON_AVG:
        acc += x;
        break;
      case BATON_PROD:
        acc *= x;
        break;
      case BATON_MIN:
        acc = std::min(acc, x);
        break;
      case BATON_MAX:
        acc = std::max(acc, x);
        break;
    }
  }
  if (c.op == BATON_AVG) acc /= world;
  const std::optional<uint64_t> bits = EncodeFloat(t, acc);
  if (!bits) {
    std::fprintf(stderr,
                 "device_check_reference: reduced value %.17g of dtype %d, op %d, world %d is "
                 "not exact (a bug of the check)\n",
                 acc, static_cast<int>(c.type), static_cast<int>(c.op), world);
    std::abort();
  }
  return *bits;
}

Images MakeImages(const Case& c, int world, int rank) {
  const TypeInfo& t = Info(c.type);
  const size_t size = t.size;
  const auto [send_elements, recv_elements] = Extent(c, world, rank);
  Images im;
  if (c.check == Check::kAllToAllV) im.v = MakeVLayout(world, rank, c.count);
  std::vector<uint8_t> input(send_elements * size);
  for (size_t i = 0; i < send_elements; ++i) Put(input, i, size, InputBits(c, world, rank, i));
  im.recv.resize(recv_elements * size + kGuardBytes);
  FillSentinel(im.recv, 0, c.seed ^ static_cast<uint64_t>(rank));
  switch (c.check) {
    case Check::kAllReduceInPlace:
    case Check::kReduceScatterInPlace:
      std::memcpy(im.recv.data(), input.data(), input.size());
      break;
    case Check::kAllGatherInPlace:
      im.send_offset = static_cast<size_t>(rank) * c.count * size;
      std::memcpy(im.recv.data() + im.send_offset, input.data(), input.size());
      break;
    default:
      im.send = std::move(input);
  }
  im.expected = im.recv;
  std::vector<uint8_t>& e = im.expected;
  const size_t n = c.count;
  switch (c.check) {
    case Check::kAllReduce:
    case Check::kAllReduceInPlace:
      for (size_t i = 0; i < n; ++i) Put(e, i, size, ReducedBits(c, world, i));
      break;
    case Check::kReduceScatter:
    case Check::kReduceScatterInPlace:
      for (size_t i = 0; i < n; ++i) {
        Put(e, i, size, ReducedBits(c, world, static_cast<size_t>(rank) * n + i));
      }
      // In place the blocks after the result are the call's scratch: the API says nothing
      // of them.
      if (c.check == Check::kReduceScatterInPlace) {
        im.ignore_from = n * size;
        im.ignore_to = n * static_cast<size_t>(world) * size;
      }
      break;
    case Check::kReduce:
      if (rank == c.root) {
        for (size_t i = 0; i < n; ++i) Put(e, i, size, ReducedBits(c, world, i));
      }
      break;
    case Check::kAllGather:
    case Check::kAllGatherInPlace:
      for (int j = 0; j < world; ++j) {
        for (size_t i = 0; i < n; ++i) Put(e, j * n + i, size, InputBits(c, world, j, i));
      }
      break;
    case Check::kGather:
      if (rank == c.root) {
        for (int j = 0; j < world; ++j) {
          for (size_t i = 0; i < n; ++i) Put(e, j * n + i, size, InputBits(c, world, j, i));
        }
      }
      break;
    case Check::kBroadcast:
      for (size_t i = 0; i < n; ++i) Put(e, i, size, InputBits(c, world, c.root, i));
      break;
    case Check::kScatter:
      for (size_t i = 0; i < n; ++i) {
        Put(e, i, size, InputBits(c, world, c.root, static_cast<size_t>(rank) * n + i));
      }
      break;
    case Check::kAllToAll:
      for (int j = 0; j < world; ++j) {
        for (size_t i = 0; i < n; ++i) {
          Put(e, j * n + i, size, InputBits(c, world, j, static_cast<size_t>(rank) * n + i));
        }
      }
      break;
    case Check::kAllToAllV:
      for (int j = 0; j < world; ++j) {
        const size_t from = MakeVLayout(world, j, n).send_displs[rank];
        for (size_t k = 0; k < im.v.recv_counts[j]; ++k) {
          Put(e, im.v.recv_displs[j] + k, size, InputBits(c, world, j, from + k));
        }
      }
      break;
    case Check::kSendRecv: {
      const int prev = (rank + world - 1) % world;
      for (size_t i = 0; i < n; ++i) Put(e, i, size, InputBits(c, world, prev, i));
      break;
    }
    case Check::kBarrier:
      break;
  }
  return im;
}

}  // namespace baton::device_check
