// Every registered schedule (collective/registry.h) as D daemons x L local ranks over the
// in-memory transport, against a serial reference of what each rank must end with: every
// collective, every algorithm, block and irregular placements, in-place buffers where the API
// allows them, a sample of types, operators, counts and roots. Every element is compared.

#include "collective/schedule.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/layout.h"
#include "collective/op_spec.h"
#include "collective/registered_memory.h"
#include "collective/registry.h"
#include "device/reduce.h"
#include "tests/collective/collective_test_support.h"
#include "tests/testing/registered_only_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"

namespace baton::collective {
namespace {

using Bytes = std::vector<std::byte>;

struct Placement {
  const char* name;
  std::vector<std::vector<int>> daemons;  // ranks of each daemon, ascending
  int world() const {
    int n = 0;
    for (const auto& d : daemons) n += static_cast<int>(d.size());
    return n;
  }
};

const std::vector<Placement>& Placements() {
  static const std::vector<Placement> placements = {
      {"1x3", {{0, 1, 2}}},
      {"3x1", {{0}, {1}, {2}}},
      {"2x2", {{0, 1}, {2, 3}}},
      {"3x2", {{0, 1}, {2, 3}, {4, 5}}},
      {"irregular", {{0, 3}, {1}, {2, 4, 5}}},
      {"4x1", {{0}, {1}, {2}, {3}}},
  };
  return placements;
}

// Each rank's call and buffers. recv may alias send (in place).
struct RankState {
  OpSpec spec;
  std::shared_ptr<Bytes> send;
  std::shared_ptr<Bytes> recv;
  size_t send_offset = 0;  // where the rank's send starts in *send (in-place all_gather)
};

// Runs the schedule of (spec.collective, algorithm) on every daemon of `placement` at once.
std::vector<absl::Status> RunSchedules(const Placement& placement, Algorithm algorithm,
                                       std::vector<RankState>& ranks, size_t chunk_bytes) {
  auto fabric = transport::NewInMemoryFabric();
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints;
  Layout base;
  base.world_size = placement.world();
  for (size_t d = 0; d < placement.daemons.size(); ++d) {
    const std::string address = absl::StrCat("daemon", d);
    auto endpoint = fabric->CreateEndpoint(address);
    EXPECT_TRUE(endpoint.ok()) << endpoint.status();
    endpoints.push_back(std::move(endpoint).value());
    base.daemons.push_back({address, placement.daemons[d], absl::StrCat("node", d)});
  }
  const OpImplementation* implementation =
      FindImplementation(ranks.front().spec.collective, algorithm);
  EXPECT_NE(implementation, nullptr);
  std::vector<absl::Status> statuses(placement.daemons.size());
  std::vector<std::thread> threads;
  for (size_t d = 0; d < placement.daemons.size(); ++d) {
    threads.emplace_back([&, d] {
      Layout layout = base;
      layout.self = static_cast<int>(d);
      // As in the daemon: the ranks' buffers and the scratch are registered with the data plane,
      // and every byte the schedule moves must name its registration.
      baton::test::RegisteredOnlyEndpoint registered_only(endpoints[d].get());
      ScratchPool scratch(&registered_only, size_t{1} << 20);
      std::vector<std::unique_ptr<transport::MemoryRegion>> registrations;
      auto registration = [&](const std::shared_ptr<Bytes>& buffer) {
        if (buffer == nullptr || buffer->empty())
          return static_cast<transport::MemoryRegion*>(nullptr);
        for (const auto& made : registrations) {
          if (made->bytes().data() == buffer->data()) return made.get();
        }
        auto made = registered_only.RegisterMemory(*buffer, transport::MemoryKind::kHost);
        EXPECT_TRUE(made.ok()) << made.status();
        registrations.push_back(std::move(made).value());
        return registrations.back().get();
      };
      std::vector<LocalPart> parts;
      for (int rank : layout.local_ranks()) {
        RankState& r = ranks[rank];
        parts.push_back({&r.spec, r.send ? r.send->data() + r.send_offset : nullptr,
                         r.recv ? r.recv->data() : nullptr, registration(r.send),
                         registration(r.recv)});
      }
      RegionTable table;
      for (const LocalPart& part : parts) {
        table.Add(part.send_region);
        table.Add(part.recv_region);
      }
      RegisteredEndpoint endpoint(&registered_only, {&table, &scratch});
      Schedule schedule;
      schedule.ctx.endpoint = &endpoint;
      schedule.ctx.scratch = &scratch;
      schedule.ctx.comm = 9;
      schedule.ctx.seq = 1;
      schedule.ctx.deadline = absl::Now() + absl::Seconds(20);
      schedule.ctx.chunk_bytes = chunk_bytes;
      schedule.layout = &layout;
      schedule.spec = parts.front().spec;
      schedule.algorithm = algorithm;
      schedule.parts = parts;
      statuses[d] = implementation->run(schedule);
      EXPECT_EQ(registered_only.raw_bytes(), 0u)
          << "daemon " << d << " moved bytes that name no registered region";
      EXPECT_EQ(endpoint.unregistered_bytes(), 0u);
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

// memcpy that accepts empty ranges (whose pointers may be null).
void CopyBytes(std::byte* dst, const std::byte* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

Bytes RandomBytes(size_t bytes, uint64_t seed) {
  Bytes data(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<std::byte>(test::Mix(seed * 1000003 + i) & 0xFF);
  }
  return data;
}

// A reducible input for rank r: exact in its type whatever the order of combination.
Bytes InputOf(DataType type, ReduceOp op, int world, int rank, size_t count, bool reduces,
              uint64_t seed) {
  if (reduces) {
    return test::ReduceInput(type, op == ReduceOp::kAvg ? ReduceOp::kSum : op, world, rank, count);
  }
  return RandomBytes(count * DataTypeSize(type), seed + static_cast<uint64_t>(rank));
}

struct Case {
  Collective collective;
  Algorithm algorithm;
  DataType type;
  ReduceOp op;
  size_t count;
  int root;
  bool in_place;
};

std::string Name(const Case& c, const Placement& p) {
  return absl::StrCat(CollectiveName(c.collective), "/", AlgorithmName(c.algorithm), " on ", p.name,
                      " ", DataTypeName(c.type), " ", ReduceOpName(c.op), " count ", c.count,
                      " root ", c.root, c.in_place ? " in place" : "");
}

bool Reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

// all_to_all_v's counts from rank i to rank j: uneven, zeros included.
uint64_t VCount(int i, int j, size_t scale) {
  return static_cast<uint64_t>((i + 2 * j) % 4) * scale;
}

// Checks one case: builds every rank's state, runs, compares with the serial reference.
void Check(const Case& c, const Placement& p, size_t chunk_bytes) {
  SCOPED_TRACE(Name(c, p));
  const int world = p.world();
  const size_t element = DataTypeSize(c.type);
  const size_t w = static_cast<size_t>(world);
  const bool reduces = Reduces(c.collective);
  std::vector<RankState> ranks(w);
  std::vector<Bytes> inputs(w);  // each rank's send as it was before the operation
  for (int r = 0; r < world; ++r) {
    RankState& s = ranks[r];
    s.spec.collective = c.collective;
    s.spec.type = c.type;
    s.spec.op = c.op;
    s.spec.count = c.collective == Collective::kBarrier || c.collective == Collective::kAllToAllV
                       ? 0
                       : c.count;
    s.spec.root = c.root;
    s.spec.algorithm = c.algorithm;
    if (c.collective == Collective::kAllToAllV) {
      uint64_t send_at = 0;
      uint64_t recv_at = 0;
      for (int j = 0; j < world; ++j) {
        s.spec.send_counts.push_back(VCount(r, j, c.count));
        s.spec.send_displs.push_back(send_at + 1);  // a gap of one element before each block
        send_at += VCount(r, j, c.count) + 1;
        s.spec.recv_counts.push_back(VCount(j, r, c.count));
        s.spec.recv_displs.push_back(recv_at + 2);
        recv_at += VCount(j, r, c.count) + 2;
      }
    }
    ASSERT_TRUE(s.spec.Validate(world, r).ok()) << s.spec.Validate(world, r);
    const size_t send_elements = s.spec.SendElements(world, r);
    const size_t recv_elements = s.spec.RecvElements(world, r);
    inputs[r] = InputOf(c.type, c.op, world, r, send_elements, reduces, 77);
    if (c.in_place && c.collective == Collective::kAllGather) {
      // The rank's send is its own block of its output.
      s.recv = std::make_shared<Bytes>(RandomBytes(recv_elements * element, 500 + r));
      CopyBytes(s.recv->data() + r * c.count * element, inputs[r].data(), inputs[r].size());
      s.send = s.recv;
      s.send_offset = r * c.count * element;
    } else if (c.in_place) {
      Bytes buffer = inputs[r];
      buffer.resize(std::max(send_elements, recv_elements) * element);
      s.send = std::make_shared<Bytes>(std::move(buffer));
      s.recv = s.send;
    } else {
      s.send = std::make_shared<Bytes>(inputs[r]);
      s.recv = std::make_shared<Bytes>(RandomBytes(recv_elements * element, 900 + r));
    }
  }
  std::vector<Bytes> before(w);  // every recv buffer before the operation
  for (int r = 0; r < world; ++r) before[r] = *ranks[r].recv;

  const std::vector<absl::Status> statuses = RunSchedules(p, c.algorithm, ranks, chunk_bytes);
  for (size_t d = 0; d < statuses.size(); ++d) ASSERT_TRUE(statuses[d].ok()) << statuses[d];

  // The reference.
  auto reduced = [&] {
    std::vector<Bytes> all(inputs.begin(), inputs.end());
    Bytes result = test::SerialReference(all, all[0].size() / element, c.type,
                                         c.op == ReduceOp::kAvg ? ReduceOp::kSum : c.op);
    if (c.op == ReduceOp::kAvg)
      device::DivideInPlace(c.type, result.data(), result.size() / element, world);
    return result;
  };
  const size_t block = c.count * element;
  for (int r = 0; r < world; ++r) {
    Bytes expected = before[r];
    switch (c.collective) {
      case Collective::kAllReduce:
        expected = reduced();
        break;
      case Collective::kReduceScatter: {
        const Bytes all = reduced();
        expected.assign(all.begin() + r * block, all.begin() + (r + 1) * block);
        break;
      }
      case Collective::kAllGather:
      case Collective::kGather:
        if (c.collective == Collective::kAllGather || r == c.root) {
          for (int i = 0; i < world; ++i) {
            CopyBytes(expected.data() + i * block, inputs[i].data(), block);
          }
        }
        break;
      case Collective::kBroadcast:
        expected = inputs[c.root];
        if (c.in_place) expected.resize(before[r].size());
        break;
      case Collective::kReduce:
        if (r == c.root) expected = reduced();
        break;
      case Collective::kAllToAll:
        for (int i = 0; i < world; ++i) {
          CopyBytes(expected.data() + i * block, inputs[i].data() + r * block, block);
        }
        break;
      case Collective::kScatter:
        CopyBytes(expected.data(), inputs[c.root].data() + r * block, block);
        break;
      case Collective::kAllToAllV:
        for (int i = 0; i < world; ++i) {
          const OpSpec& from = ranks[i].spec;
          const OpSpec& to = ranks[r].spec;
          CopyBytes(expected.data() + to.recv_displs[i] * element,
                    inputs[i].data() + from.send_displs[r] * element, to.recv_counts[i] * element);
        }
        break;
      default:
        break;
    }
    const Bytes& got = *ranks[r].recv;
    if (c.collective == Collective::kBroadcast && c.in_place && r != c.root) {
      // Only the broadcast's count elements are defined.
      ASSERT_EQ(test::FirstDifference(Bytes(got.begin(), got.begin() + block),
                                      Bytes(expected.begin(), expected.begin() + block), element),
                -1)
          << "rank " << r;
      continue;
    }
    ASSERT_EQ(got.size(), expected.size()) << "rank " << r;
    EXPECT_EQ(test::FirstDifference(got, expected, element), -1) << "rank " << r;
  }
}

bool InPlaceAllowed(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kAllToAll || c == Collective::kAllGather ||
         c == Collective::kAllToAllV || c == Collective::kBroadcast;
}

// Every registered schedule, every placement.
TEST(ScheduleTest, EveryScheduleMatchesTheSerialReference) {
  constexpr size_t kChunk = 256;  // small, so that pipelines and slabs have several pieces
  int cases = 0;
  for (const OpImplementation& entry : Implementations()) {
    if (entry.run == nullptr) continue;
    const Collective collective = entry.collective;
    const bool reduces = Reduces(collective);
    OpSpec probe;
    probe.collective = collective;
    const bool rooted = probe.Rooted();
    std::vector<DataType> types = {DataType::kFloat32, DataType::kInt32};
    if (reduces) types.push_back(DataType::kBfloat16);
    if (!reduces) types.push_back(DataType::kUint8);
    const std::vector<ReduceOp> ops =
        reduces ? std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}
                : std::vector<ReduceOp>{ReduceOp::kSum};
    const std::vector<size_t> counts = collective == Collective::kBarrier
                                           ? std::vector<size_t>{0}
                                           : std::vector<size_t>{0, 1, 5, 3 * kChunk + 7};
    for (const Placement& p : Placements()) {
      std::vector<int> roots = {0};
      if (rooted) {
        roots.clear();
        for (int r = 0; r < p.world(); ++r) roots.push_back(r);
      }
      for (DataType type : types) {
        for (ReduceOp op : ops) {
          if (op == ReduceOp::kAvg && type == DataType::kInt32) continue;
          for (size_t count : counts) {
            for (int root : roots) {
              for (bool in_place : {false, true}) {
                if (in_place && !InPlaceAllowed(collective)) continue;
                // Keep the sweep small where it adds little: roots and in-place at one type.
                if ((root != 0 || in_place) && type != DataType::kFloat32) continue;
                Check(Case{collective, entry.algorithm, type, op, count, root, in_place}, p,
                      kChunk);
                ++cases;
                if (testing::Test::HasFatalFailure()) return;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 500);
}

// all_to_all_v counts that disagree between daemons fail on the length check; they never hang
// or write past a block.
TEST(ScheduleTest, AllToAllVCountsThatDisagreeFailCleanly) {
  const Placement p{"2x1", {{0}, {1}}};
  std::vector<RankState> ranks(2);
  for (int r = 0; r < 2; ++r) {
    OpSpec& spec = ranks[r].spec;
    spec.collective = Collective::kAllToAllV;
    spec.type = DataType::kInt32;
    spec.send_counts = {2, 2};
    spec.send_displs = {0, 2};
    // Rank 1 expects 3 elements from rank 0, which sends 2.
    spec.recv_counts = r == 1 ? std::vector<uint64_t>{3, 2} : std::vector<uint64_t>{2, 2};
    spec.recv_displs = {0, 3};
    ranks[r].send = std::make_shared<Bytes>(16);
    ranks[r].recv = std::make_shared<Bytes>(24);
  }
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> statuses = RunSchedules(p, Algorithm::kDirect, ranks, 256);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_FALSE(statuses[1].ok());
  EXPECT_NE(statuses[1].message().find("rank 0 to rank 1"), std::string::npos) << statuses[1];
}

// Local ranks whose all_to_all_v counts disagree fail with both ranks named.
TEST(ScheduleTest, AllToAllVLocalCountsThatDisagreeNameBothRanks) {
  const Placement p{"1x2", {{0, 1}}};
  std::vector<RankState> ranks(2);
  for (int r = 0; r < 2; ++r) {
    OpSpec& spec = ranks[r].spec;
    spec.collective = Collective::kAllToAllV;
    spec.type = DataType::kInt32;
    spec.send_counts = {1, 1};
    spec.send_displs = {0, 1};
    spec.recv_counts = {1, r == 0 ? 2u : 1u};
    spec.recv_displs = {0, 1};
    ranks[r].send = std::make_shared<Bytes>(8);
    ranks[r].recv = std::make_shared<Bytes>(12);
  }
  const std::vector<absl::Status> statuses = RunSchedules(p, Algorithm::kDirect, ranks, 256);
  ASSERT_FALSE(statuses[0].ok());
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(statuses[0].message().find("rank 1 sends 1 elements to rank 0, which expects 2"),
            std::string::npos)
      << statuses[0];
}

// The registry is the one table: IsSupported, the algorithms of each collective and the help
// text agree with it, and every collective has an implementation.
TEST(RegistryTest, EveryCollectiveIsRegisteredOnceWithItsAlgorithms) {
  for (int c = 0; c <= static_cast<int>(Collective::kRecv); ++c) {
    const auto collective = static_cast<Collective>(c);
    const std::vector<Algorithm> algorithms = AlgorithmsOf(collective);
    EXPECT_FALSE(algorithms.empty()) << CollectiveName(collective);
    for (int a = 0; a <= static_cast<int>(Algorithm::kHalvingDoubling); ++a) {
      const auto algorithm = static_cast<Algorithm>(a);
      const bool listed =
          std::find(algorithms.begin(), algorithms.end(), algorithm) != algorithms.end();
      EXPECT_EQ(IsSupported(collective, algorithm), listed)
          << CollectiveName(collective) << "/" << AlgorithmName(algorithm);
    }
    EXPECT_NE(DescribeImplementations().find(std::string(CollectiveName(collective))),
              std::string::npos);
  }
  EXPECT_EQ(AlgorithmNamesOf(Collective::kAllReduce), "ring, tree, doubling, halving_doubling");
  EXPECT_EQ(FindImplementation(Collective::kReduceScatter, Algorithm::kTree), nullptr);
}

}  // namespace
}  // namespace baton::collective
