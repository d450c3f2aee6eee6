// Device memory through real daemons, on the host fake (device/host_fake.h: memfd "device
// memory", thread streams, shared-word events), so that the whole protocol runs without a GPU:
// allocations and registrations passed as descriptors, every collective on device buffers (on
// the device inside one daemon, staged across daemons), stream order with the host returning at
// once, and every failure releasing the waiting stream with an asynchronous error.
//
// The daemons run with --device=fake, the test process with BATON_DEVICE=fake; ranks are threads.

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/lib/client_core.h"
#include "device/host_fake.h"
#include "gtest/gtest.h"
#include "tests/testing/core_ranks.h"
#include "tests/testing/local_test_cluster.h"
#include "tests/testing/metrics_page.h"

namespace baton {
namespace {

using collective::Collective;
using core::CallOptions;
using core::Client;
using core::Communicator;
using core::DataType;
using core::ReduceOp;

device::HostFakeDevice& Fake() {
  absl::StatusOr<device::Device*> device = core::ClientDevice();
  EXPECT_TRUE(device.ok()) << device.status();
  return *static_cast<device::HostFakeDevice*>(*device);
}

struct DeviceCluster {
  static constexpr int kDaemons = 2;
  static constexpr bool kFakeDevice = true;
  // Small chunks, so that staged buffers are copied and sent in many pieces.
  static std::vector<std::string> DaemonFlags() { return {"--chunk-bytes=4096"}; }
};
using DeviceTest = testing::CoreClusterTest<DeviceCluster>;

// A device buffer of n floats from AllocateDevice.
float* DeviceFloats(Client& client, size_t n) {
  absl::StatusOr<void*> data = client.AllocateDevice(n * sizeof(float), 0);
  EXPECT_TRUE(data.ok()) << data.status();
  return data.ok() ? static_cast<float*>(*data) : nullptr;
}

float In(int rank, size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 101)); }

// The operations EveryCollective runs with data, and how many elements each rank's buffers hold.
const std::vector<std::string> kDataOperations = {"all_reduce",     "broadcast", "all_gather",
                                                  "reduce_scatter", "reduce",    "all_to_all",
                                                  "send",           "recv"};
constexpr size_t kEveryCollectiveCount = 3001;

// Every collective on device buffers, blocking (no stream): one daemon (on the device) and two
// daemons (staged), 4 ranks.
void EveryCollective(int rank, Communicator& comm, Client& client) {
  const int world = comm.world_size();
  const size_t n = kEveryCollectiveCount;
  float* send = DeviceFloats(client, n * world);
  float* recv = DeviceFloats(client, n * world);
  ASSERT_TRUE(send != nullptr && recv != nullptr);
  auto fill = [&] {
    for (size_t i = 0; i < n * world; ++i) send[i] = In(rank, i);
    std::fill(recv, recv + n * world, -1.0f);
  };
  fill();
  ASSERT_TRUE(comm.AllReduce(send, recv, n, DataType::kFloat32, ReduceOp::kSum).ok());
  for (size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int r = 0; r < world; ++r) sum += In(r, i);
    ASSERT_EQ(recv[i], sum) << "all_reduce " << i;
  }
  fill();  // in place, max
  ASSERT_TRUE(comm.AllReduce(send, send, n, DataType::kFloat32, ReduceOp::kMax).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(send[i], In(world - 1, i)) << "max " << i;
  fill();
  ASSERT_TRUE(comm.Broadcast(send, recv, n, DataType::kFloat32, 1).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(recv[i], In(1, i)) << "broadcast " << i;
  fill();
  ASSERT_TRUE(comm.AllGather(send, recv, n, DataType::kFloat32).ok());
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(recv[r * n + i], In(r, i)) << "all_gather " << i;
  }
  fill();
  ASSERT_TRUE(comm.ReduceScatter(send, recv, n, DataType::kFloat32, ReduceOp::kSum).ok());
  for (size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int r = 0; r < world; ++r) sum += In(r, rank * n + i);
    ASSERT_EQ(recv[i], sum) << "reduce_scatter " << i;
  }
  fill();
  ASSERT_TRUE(comm.Reduce(send, recv, n, DataType::kFloat32, ReduceOp::kSum, 2).ok());
  if (rank == 2) {
    for (size_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int r = 0; r < world; ++r) sum += In(r, i);
      ASSERT_EQ(recv[i], sum) << "reduce " << i;
    }
  }
  fill();
  ASSERT_TRUE(comm.AllToAll(send, recv, n, DataType::kFloat32).ok());
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(recv[r * n + i], In(r, rank * n + i)) << "all_to_all " << r << " " << i;
    }
  }
  fill();  // a ring of sends and receives: even ranks send first
  const int next = (rank + 1) % world;
  const int prev = (rank + world - 1) % world;
  if (rank % 2 == 0) {
    ASSERT_TRUE(comm.Send(send, n, DataType::kFloat32, next).ok());
    ASSERT_TRUE(comm.Recv(recv, n, DataType::kFloat32, prev).ok());
  } else {
    ASSERT_TRUE(comm.Recv(recv, n, DataType::kFloat32, prev).ok());
    ASSERT_TRUE(comm.Send(send, n, DataType::kFloat32, next).ok());
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(recv[i], In(prev, i)) << "recv " << i;
  ASSERT_TRUE(comm.Barrier().ok());
  EXPECT_TRUE(client.FreeDevice(send).ok());
  EXPECT_TRUE(client.FreeDevice(recv).ok());
}

// What daemon `daemon` has staged through host memory so far, by operation
// (baton_device_staged_bytes_total; 0 for an operation without a series).
std::map<std::string, double> StagedBytes(const testing::LocalTestCluster& cluster, int daemon) {
  std::map<std::string, double> samples =
      testing::ScrapeMetrics(cluster.daemons()[daemon].metrics_address);
  std::map<std::string, double> staged;
  for (const std::string& op : kDataOperations) {
    staged[op] = samples[absl::StrCat("baton_device_staged_bytes_total{local_node=\"",
                                      cluster.daemons()[daemon].node_name, "\",op=\"", op, "\"}")];
  }
  return staged;
}

// all_reduce, broadcast and all_gather run on the device's kernels, staging nothing; the other
// operations are staged through host memory even inside one daemon.
TEST_F(DeviceTest, EveryCollectiveOnOneDaemonRunsOnTheDevice) {
  ASSERT_TRUE(cluster_->ok());
  const std::map<std::string, double> before = StagedBytes(*cluster_, 0);
  RunRanks(
      4, [](int) { return 0; },
      [](int rank, Communicator& comm, Client& client) {
        EveryCollective(rank, comm, client);
        ASSERT_TRUE(comm.AllReduce(DeviceFloats(client, 1), DeviceFloats(client, 1), 1,
                                   DataType::kFloat32, ReduceOp::kSum)
                        .ok());
        EXPECT_EQ(comm.last_algorithm(), "local");
      });
  const std::map<std::string, double> after = StagedBytes(*cluster_, 0);
  for (const char* op : {"all_reduce", "broadcast", "all_gather"}) {
    EXPECT_EQ(after.at(op), before.at(op)) << op << " staged device memory";
  }
  for (const char* op : {"reduce_scatter", "reduce", "all_to_all", "send", "recv"}) {
    EXPECT_GE(after.at(op) - before.at(op), kEveryCollectiveCount * sizeof(float))
        << op << " staged too little";
  }
}

// Across daemons every operation with data is staged through host memory on both daemons (the
// daemons count what they copy); the values are checked as on one daemon. A barrier has no data.
TEST_F(DeviceTest, EveryCollectiveAcrossDaemonsIsStaged) {
  ASSERT_TRUE(cluster_->ok());
  const std::map<std::string, double> before[] = {StagedBytes(*cluster_, 0),
                                                  StagedBytes(*cluster_, 1)};
  RunRanks(
      4, [](int rank) { return rank % 2; }, EveryCollective);
  for (int daemon = 0; daemon < 2; ++daemon) {
    const std::map<std::string, double> after = StagedBytes(*cluster_, daemon);
    for (const std::string& op : kDataOperations) {
      // At least one rank's buffer of the operation went one way (each daemon has two ranks).
      EXPECT_GE(after.at(op) - before[daemon].at(op), kEveryCollectiveCount * sizeof(float))
          << op << " on daemon " << daemon << " staged too little";
    }
    // The staging buffers are registered with the data plane once, when the daemon's pinned
    // pool makes them: every staged byte that crossed went as registered memory.
    for (const auto& [name, value] :
         testing::ScrapeMetrics(cluster_->daemons()[daemon].metrics_address)) {
      if (name.starts_with("baton_data_unregistered_bytes_total")) {
        EXPECT_EQ(value, 0) << name << " on daemon " << daemon;
      }
    }
  }
}

// all_reduce across daemons staged in pipelined chunks (collective/staged_input.h) under every
// algorithm, 100 chunks each: on daemon 0 the ranks hold device memory (reduced on the device,
// then staged as one buffer while it is sent), on daemon 1 host memory, so the staged daemon and
// the plain one must agree on the wire.
TEST_F(DeviceTest, StagedAllReducePipelinesUnderEveryAlgorithm) {
  RunRanks(
      4, [](int rank) { return rank % 2; },
      [](int rank, Communicator& comm, Client& client) {
        const size_t n = 100 * 1024 + 3;  // 100 chunks of 4 KiB, and a tail
        const bool on_device = rank % 2 == 0;
        std::vector<float> host_memory(on_device ? 0 : n);
        float* data = on_device ? DeviceFloats(client, n) : host_memory.data();
        ASSERT_NE(data, nullptr);
        for (const collective::Algorithm algorithm :
             {collective::Algorithm::kRing, collective::Algorithm::kTree,
              collective::Algorithm::kDoubling, collective::Algorithm::kHalvingDoubling}) {
          for (size_t i = 0; i < n; ++i) data[i] = In(rank, i);
          CallOptions options;
          options.algorithm = algorithm;
          const absl::Status status =
              comm.AllReduce(data, data, n, DataType::kFloat32, ReduceOp::kSum, options);
          ASSERT_TRUE(status.ok()) << collective::AlgorithmName(algorithm) << ": " << status;
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(data[i], In(0, i) + In(1, i) + In(2, i) + In(3, i))
                << collective::AlgorithmName(algorithm) << " element " << i;
          }
        }
        if (on_device) {
          EXPECT_TRUE(client.FreeDevice(data).ok());
        }
      });
}

// Memory the process did not get from AllocateDevice (another allocator's) is registered on
// first use, in several segments, at an offset inside its allocation.
TEST_F(DeviceTest, ForeignSegmentedMemoryIsRegisteredOnUse) {
  RunRanks(
      2, [](int rank) { return rank; },
      [](int rank, Communicator& comm, Client& client) {
        absl::StatusOr<std::unique_ptr<device::Allocation>> memory =
            Fake().AllocateSegmented({8192, 4096, 8192}, 0);
        ASSERT_TRUE(memory.ok()) << memory.status();
        auto* data = static_cast<float*>((*memory)->data()) + 100;  // not the base
        const size_t n = 4000;                                      // spans all three segments
        for (size_t i = 0; i < n; ++i) data[i] = In(rank, i);
        ASSERT_TRUE(comm.AllReduce(data, data, n, DataType::kFloat32, ReduceOp::kSum).ok());
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(data[i], In(0, i) + In(1, i)) << i;
        EXPECT_TRUE(client.DeregisterDevice(data).ok());
        EXPECT_TRUE(absl::IsInvalidArgument(client.DeregisterDevice(data)));
      });
}

// An allocation freed without Deregister and a new one made at the same address: the cached
// registration is for the old allocation (its driver id differs), so the new one is registered
// anew and the daemon reads the new memory, not its mapping of the old. Rank 0 reuses the
// address; rank 1 (a thread of the same process) allocates nothing meanwhile.
TEST_F(DeviceTest, AReusedAddressIsRegisteredAnew) {
  RunRanks(
      2, [](int) { return 0; },
      [](int rank, Communicator& comm, Client& client) {
        const size_t n = 1024;
        float* data = nullptr;
        std::unique_ptr<device::Allocation> foreign;
        auto allocate = [&] {
          absl::StatusOr<std::unique_ptr<device::Allocation>> memory =
              Fake().AllocateSegmented({n * sizeof(float)}, 0);
          EXPECT_TRUE(memory.ok()) << memory.status();
          return memory.ok() ? *std::move(memory) : nullptr;
        };
        if (rank == 0) {
          foreign = allocate();
          ASSERT_NE(foreign, nullptr);
          data = static_cast<float*>(foreign->data());
        } else {
          data = DeviceFloats(client, n);
        }
        for (size_t i = 0; i < n; ++i) data[i] = In(rank, i);
        ASSERT_TRUE(comm.AllReduce(data, data, n, DataType::kFloat32, ReduceOp::kSum).ok());
        int reused = 1;
        std::vector<std::unique_ptr<device::Allocation>> others;
        if (rank == 0) {
          foreign.reset();  // freed, not deregistered
          // Allocations until one lands at the same address (the others are kept meanwhile,
          // so that the kernel hands that range out again).
          for (int attempt = 0; attempt < 64 && foreign == nullptr; ++attempt) {
            std::unique_ptr<device::Allocation> next = allocate();
            ASSERT_NE(next, nullptr);
            if (next->data() == data) {
              foreign = std::move(next);
            } else {
              others.push_back(std::move(next));
            }
          }
          reused = foreign != nullptr ? 1 : 0;
        }
        ASSERT_TRUE(comm.AllReduce(&reused, &reused, 1, DataType::kInt32, ReduceOp::kMin).ok());
        if (reused == 0) GTEST_SKIP() << "the address was not handed out again";
        for (size_t i = 0; i < n; ++i) data[i] = In(rank + 7, i);
        ASSERT_TRUE(comm.AllReduce(data, data, n, DataType::kFloat32, ReduceOp::kSum).ok());
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(data[i], In(7, i) + In(8, i)) << i;
      });
}

TEST_F(DeviceTest, UnshareableMemoryIsRefusedClearly) {
  RunRanks(
      1, [](int) { return 0; },
      [](int, Communicator& comm, Client&) {
        absl::StatusOr<std::unique_ptr<device::Allocation>> memory =
            Fake().AllocateUnshareable(4096, 0);
        ASSERT_TRUE(memory.ok());
        const absl::Status status = comm.AllReduce((*memory)->data(), (*memory)->data(), 16,
                                                   DataType::kFloat32, ReduceOp::kSum);
        EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
      });
}

// Stream order: a producer "kernel" that the test holds back, the all-reduce, and a consumer
// that copies the result: the host call returns while the producer is still held, and the
// consumer sees the sum of what the producers wrote.
TEST_F(DeviceTest, StreamOrderedCallsReturnAtOnceAndFollowTheStream) {
  constexpr int kWorld = 3;
  absl::Notification release_producers;
  std::atomic<int> returned{0};
  RunRanks(
      kWorld, [](int rank) { return rank % 2; },
      [&](int rank, Communicator& comm, Client& client) {
        const size_t n = 5000;
        float* data = DeviceFloats(client, n);
        ASSERT_NE(data, nullptr);
        std::fill(data, data + n, 0.0f);
        std::unique_ptr<device::FakeStream> stream = Fake().NewStream();
        stream->Enqueue([&, data] {
          release_producers.WaitForNotification();
          for (size_t i = 0; i < n; ++i) data[i] = In(rank, i);
        });
        CallOptions options;
        options.on_stream = true;
        options.stream = stream->handle();
        options.timeout = absl::Seconds(30);
        // Two in a row, so that the second waits in the stream behind the first.
        ASSERT_TRUE(
            comm.AllReduce(data, data, n, DataType::kFloat32, ReduceOp::kSum, options).ok());
        ASSERT_TRUE(
            comm.AllReduce(data, data, n, DataType::kFloat32, ReduceOp::kSum, options).ok());
        std::vector<float> seen(n, -1.0f);
        stream->Enqueue([&, data] { std::memcpy(seen.data(), data, n * sizeof(float)); });
        if (++returned == kWorld) release_producers.Notify();  // every host call returned first
        ASSERT_TRUE(Fake().Synchronize(stream->handle()).ok());
        ASSERT_TRUE(comm.AsyncError().ok()) << comm.AsyncError();
        for (size_t i = 0; i < n; ++i) {
          float sum = 0;
          for (int r = 0; r < kWorld; ++r) sum += In(r, i);
          ASSERT_EQ(seen[i], sum * kWorld) << i;
        }
      });
}

// More stream-ordered calls than event slots in flight: each slot is reused only after the
// daemon waited for its last use.
TEST_F(DeviceTest, ManyStreamOrderedCallsInFlight) {
  RunRanks(
      2, [](int) { return 0; },
      [](int rank, Communicator& comm, Client& client) {
        float* data = DeviceFloats(client, 64);
        ASSERT_NE(data, nullptr);
        std::fill(data, data + 64, static_cast<float>(rank + 1));
        std::unique_ptr<device::FakeStream> stream = Fake().NewStream();
        CallOptions options;
        options.on_stream = true;
        options.stream = stream->handle();
        for (int k = 0; k < 20; ++k) {
          const absl::Status s =
              comm.AllReduce(data, data, 64, DataType::kFloat32, ReduceOp::kMax, options);
          ASSERT_TRUE(s.ok()) << s;
          stream->Enqueue([data] {
            for (int i = 0; i < 64; ++i) data[i] += 1.0f;
          });
        }
        ASSERT_TRUE(Fake().Synchronize(stream->handle()).ok());
        for (int i = 0; i < 64; ++i) ASSERT_EQ(data[i], 2.0f + 20.0f) << i;
      });
}

// A rank that never calls: its peer's operation fails at the deadline, its stream moves on, and
// the failure is the communicator's asynchronous error; later stream-ordered calls fail at once.
TEST_F(DeviceTest, AFailedStreamOrderedCallReleasesTheStream) {
  RunRanks(
      2, [](int rank) { return rank; },
      [](int rank, Communicator& comm, Client& client) {
        if (rank == 1) return;  // never calls (its client closes when the thread ends)
        float* data = DeviceFloats(client, 16);
        ASSERT_NE(data, nullptr);
        std::unique_ptr<device::FakeStream> stream = Fake().NewStream();
        CallOptions options;
        options.on_stream = true;
        options.stream = stream->handle();
        options.timeout = absl::Seconds(2);
        ASSERT_TRUE(
            comm.AllReduce(data, data, 16, DataType::kFloat32, ReduceOp::kSum, options).ok());
        std::atomic<bool> after{false};
        stream->Enqueue([&after] { after = true; });
        ASSERT_TRUE(Fake().Synchronize(stream->handle()).ok());
        EXPECT_TRUE(after.load());
        const absl::Status error = comm.AsyncError();
        EXPECT_FALSE(error.ok());
        EXPECT_FALSE(
            comm.AllReduce(data, data, 16, DataType::kFloat32, ReduceOp::kSum, options).ok());
      });
}

// Host memory is refused for a stream-ordered call, before anything is enqueued.
TEST_F(DeviceTest, StreamOrderedCallsTakeDeviceMemoryOnly) {
  RunRanks(
      1, [](int) { return 0; },
      [](int, Communicator& comm, Client&) {
        std::vector<float> host(8);
        std::unique_ptr<device::FakeStream> stream = Fake().NewStream();
        CallOptions options;
        options.on_stream = true;
        options.stream = stream->handle();
        const absl::Status status = comm.AllReduce(host.data(), host.data(), 8, DataType::kFloat32,
                                                   ReduceOp::kSum, options);
        EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
        EXPECT_TRUE(comm.AsyncError().ok());
      });
}

}  // namespace
}  // namespace baton
