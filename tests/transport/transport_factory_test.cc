// The Transport factories of the TCP and in-memory transports: name, Listen, CanReach and
// its endpoints' RegisterMemory, which every such transport implements the same way.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "transport/exposure_table.h"
#include "transport/flow_control.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/receive_matcher.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace baton::transport {
namespace {

struct FactoryParam {
  std::string name;
  std::function<std::unique_ptr<Transport>(InMemoryFabric&)> make;
};

class TransportFactoryTest : public ::testing::TestWithParam<FactoryParam> {
 protected:
  std::unique_ptr<InMemoryFabric> fabric_ = NewInMemoryFabric();
  std::unique_ptr<Transport> transport_ = GetParam().make(*fabric_);
};

TEST_P(TransportFactoryTest, ListensAndSendsToItself) {
  EXPECT_EQ(transport_->name(), GetParam().name);
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = transport_->Listen();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string self = (*endpoint)->address();
  EXPECT_FALSE(self.empty());
  std::vector<std::byte> sent(16, std::byte{7}), received(16);
  ASSERT_TRUE((*endpoint)->Send(self, Tag{.seq = 1}, sent, absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(
      (*endpoint)->Recv(self, Tag{.seq = 1}, received, absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(received, sent);
}

TEST_P(TransportFactoryTest, ReachesOnlyPeersThatAdvertiseIt) {
  const PeerInfo self{"node-a", {}, {{GetParam().name, "a"}}};
  EXPECT_TRUE(transport_->CanReach(self, PeerInfo{"node-b", {}, {{GetParam().name, "b"}}}));
  EXPECT_TRUE(
      transport_->CanReach(self, PeerInfo{"node-b", {}, {{"shm", "x"}, {GetParam().name, "b"}}}));
  EXPECT_FALSE(transport_->CanReach(self, PeerInfo{"node-b", {}, {{"shm", "x"}}}));
  EXPECT_FALSE(transport_->CanReach(self, PeerInfo{"node-b", {}, {}}));
}

TEST_P(TransportFactoryTest, ItsEndpointsRegisterHostMemoryOnly) {
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = transport_->Listen();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::vector<std::byte> memory(100);
  absl::StatusOr<std::unique_ptr<MemoryRegion>> region =
      (*endpoint)->RegisterMemory(memory, MemoryKind::kHost);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->kind(), MemoryKind::kHost);
  EXPECT_EQ((*region)->bytes().data(), memory.data());
  EXPECT_EQ((*region)->bytes().size(), 100u);
  absl::StatusOr<ByteSpan> inside = (*region)->Slice(90, 10);
  ASSERT_TRUE(inside.ok());
  EXPECT_EQ(inside->data(), memory.data() + 90);
  EXPECT_EQ((*region)->Slice(90, 11).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*region)->Slice(101, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*endpoint)->RegisterMemory(memory, MemoryKind::kDevice).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*endpoint)->MovesDirectly("anyone", MemoryKind::kDevice));
  EXPECT_TRUE((*endpoint)->MovesDirectly("anyone", MemoryKind::kHost));
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportFactoryTest,
                         ::testing::Values(FactoryParam{"inmemory",
                                                        [](InMemoryFabric& fabric) {
                                                          return fabric.NewTransport("mem-0");
                                                        }},
                                           FactoryParam{"tcp",
                                                        [](InMemoryFabric&) {
                                                          TcpOptions options;
                                                          options.listen_address = "127.0.0.1:0";
                                                          return NewTcpTransport(options);
                                                        }}),
                         [](const ::testing::TestParamInfo<FactoryParam>& info) {
                           return info.param.name;
                         });

TEST(InMemoryTransportTest, ListensOnceForItsAddress) {
  std::unique_ptr<InMemoryFabric> fabric = NewInMemoryFabric();
  std::unique_ptr<Transport> transport = fabric->NewTransport("mem-0");
  absl::StatusOr<std::unique_ptr<Endpoint>> first = transport->Listen();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)->address(), "mem-0");
  EXPECT_EQ(transport->Listen().status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(TcpTransportTest, CountsChecksumAndSealFailuresRefusedMessagesAndWritesAndRetransmits) {
  TcpOptions options;
  options.listen_address = "127.0.0.1:0";
  std::unique_ptr<Transport> transport = NewTcpTransport(options);
  std::unique_ptr<Endpoint> a = *transport->Listen();
  std::unique_ptr<Endpoint> b = *transport->Listen();
  std::vector<std::byte> data(8);
  ASSERT_TRUE(a->Send(b->address(), Tag{}, data, absl::Now() + absl::Seconds(10)).ok());
  const std::vector<LinkStats> stats = a->Stats();
  ASSERT_EQ(stats.size(), 1u);
  // Sorted by name, as LinkStats promises.
  ASSERT_EQ(stats[0].counters.size(), 6u);
  EXPECT_EQ(stats[0].counters[0].name, kChecksumFailuresCounter);
  EXPECT_EQ(stats[0].counters[0].value, 0u);
  EXPECT_EQ(stats[0].counters[1].name, kCreditViolationsCounter);
  EXPECT_EQ(stats[0].counters[1].value, 0u);
  EXPECT_EQ(stats[0].counters[2].name, kRefusedMessagesCounter);
  EXPECT_EQ(stats[0].counters[2].value, 0u);
  EXPECT_EQ(stats[0].counters[3].name, kRefusedWritesCounter);
  EXPECT_EQ(stats[0].counters[3].value, 0u);
  EXPECT_EQ(stats[0].counters[4].name, kRetransmitsCounter);
  EXPECT_EQ(stats[0].counters[5].name, kSealFailuresCounter);
  EXPECT_EQ(stats[0].counters[5].value, 0u);
  EXPECT_EQ(stats[0].Counter("checksum_failures"), 0u);
  EXPECT_EQ(stats[0].Counter("retransmits"), stats[0].counters[4].value);
  EXPECT_EQ(stats[0].Counter("no_such_counter"), 0u);
}

}  // namespace
}  // namespace baton::transport
