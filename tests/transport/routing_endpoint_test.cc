#include "transport/routing_endpoint.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/registered_only_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"
#include "transport/transport.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

std::vector<std::byte> Bytes(const std::string& text) {
  std::vector<std::byte> bytes(text.size());
  for (size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<std::byte>(text[i]);
  return bytes;
}

// Two transports, as two in-memory fabrics: "primary" (everyone) and "fast" (a and b only).
// Daemon a routes b over fast; c, which has no fast endpoint, stays on the primary.
class RoutingEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_primary_ = *primary_fabric_->CreateEndpoint("a");
    b_primary_ = *primary_fabric_->CreateEndpoint("b");
    c_primary_ = *primary_fabric_->CreateEndpoint("c");
    a_fast_ = *fast_fabric_->CreateEndpoint("a-fast");
    b_fast_ = *fast_fabric_->CreateEndpoint("b-fast");
    router_ =
        std::make_unique<RoutingEndpoint>(std::vector<Endpoint*>{a_primary_.get(), a_fast_.get()});
    ASSERT_TRUE(a_fast_->Connect("b-fast", *b_fast_->ConnectionData("a-fast")).ok());
    ASSERT_TRUE(b_fast_->Connect("a-fast", *a_fast_->ConnectionData("b-fast")).ok());
  }

  std::unique_ptr<InMemoryFabric> primary_fabric_ = NewInMemoryFabric();
  // Like verbs: its links need connection data exchanged per pair.
  std::unique_ptr<InMemoryFabric> fast_fabric_ =
      NewInMemoryFabric({.require_connection_data = true});
  std::unique_ptr<Endpoint> a_primary_, b_primary_, c_primary_, a_fast_, b_fast_;
  std::unique_ptr<RoutingEndpoint> router_;
};

TEST_F(RoutingEndpointTest, UnroutedPeersGoToThePrimaryByTheirOwnName) {
  EXPECT_EQ(router_->address(), "a");
  ASSERT_TRUE(router_->Send("c", Tag{.seq = 1}, Bytes("hello"), Deadline()).ok());
  std::vector<std::byte> received(5);
  ASSERT_TRUE(c_primary_->Recv("a", Tag{.seq = 1}, received, Deadline()).ok());
  EXPECT_EQ(received, Bytes("hello"));
}

TEST_F(RoutingEndpointTest, RoutedPeerTravelsOverItsTransportUnderItsPlanName) {
  ASSERT_TRUE(router_->AddRoute("b", a_fast_.get(), "b-fast").ok());
  ASSERT_TRUE(router_->Send("b", Tag{.seq = 1}, Bytes("fast"), Deadline()).ok());
  std::vector<std::byte> received(4);
  ASSERT_TRUE(b_fast_->Recv("a-fast", Tag{.seq = 1}, received, Deadline()).ok());
  EXPECT_EQ(received, Bytes("fast"));
  // Nothing reached b on the primary.
  EXPECT_EQ(b_primary_->Recv("a", Tag{.seq = 1}, received, absl::Now()).code(),
            absl::StatusCode::kDeadlineExceeded);

  // The answer is received under the name "b", from b's fast endpoint.
  ASSERT_TRUE(b_fast_->Send("a-fast", Tag{.seq = 2}, Bytes("back"), Deadline()).ok());
  ASSERT_TRUE(router_->Recv("b", Tag{.seq = 2}, received, Deadline()).ok());
  EXPECT_EQ(received, Bytes("back"));

  // Stats name the peer as the plan does, and c still goes to the primary.
  ASSERT_TRUE(router_->Send("c", Tag{.seq = 3}, Bytes("x"), Deadline()).ok());
  std::vector<std::string> peers;
  for (const LinkStats& link : router_->Stats()) peers.push_back(link.peer);
  EXPECT_THAT(peers, ::testing::ElementsAre("b", "c"));
}

TEST_F(RoutingEndpointTest, AbortReachesEveryTransport) {
  ASSERT_TRUE(router_->AddRoute("b", a_fast_.get(), "b-fast").ok());
  std::vector<std::byte> buffer(4);
  std::unique_ptr<PostedRecv> over_fast =
      router_->PostRecv("b", Tag{.comm = 7, .seq = 1}, buffer, Deadline(), nullptr);
  std::unique_ptr<PostedRecv> over_primary =
      router_->PostRecv("c", Tag{.comm = 7, .seq = 1}, buffer, Deadline(), nullptr);
  router_->Abort(7, absl::AbortedError("stop"));
  EXPECT_EQ(over_fast->Wait().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(over_primary->Wait().code(), absl::StatusCode::kAborted);
}

TEST_F(RoutingEndpointTest, SelectRoutesWithTheSelectorsChoice) {
  std::unique_ptr<Transport> primary = primary_fabric_->NewTransport("unused");
  std::unique_ptr<Transport> fast = fast_fabric_->NewTransport("unused-fast");
  // Both are "inmemory": the first one b advertises wins, which is the primary's position.
  std::vector<Transport*> transports{primary.get(), fast.get()};
  const PeerInfo self{"node-a", {}, {{"inmemory", "a"}}};
  const PeerInfo b{"node-b", {}, {{"inmemory", "b"}}};
  ASSERT_TRUE(router_->Select(transports, self, b, "b").ok());
  ASSERT_TRUE(router_->Send("b", Tag{.seq = 1}, Bytes("p"), Deadline()).ok());
  std::vector<std::byte> received(1);
  ASSERT_TRUE(b_primary_->Recv("a", Tag{.seq = 1}, received, Deadline()).ok());

  const PeerInfo nothing{"node-z", {}, {{"verbs", "mlx5_0"}}};
  const absl::Status status = router_->Select(transports, self, nothing, "z");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("node-z"));
}

TEST_F(RoutingEndpointTest, RejectsARouteToAnUnknownEndpointOrAChangedRoute) {
  EXPECT_EQ(router_->AddRoute("b", b_fast_.get(), "b-fast").code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(router_->AddRoute("b", a_fast_.get(), "b-fast").ok());
  EXPECT_TRUE(router_->AddRoute("b", a_fast_.get(), "b-fast").ok());
  EXPECT_EQ(router_->AddRoute("b", a_primary_.get(), "b").code(),
            absl::StatusCode::kInvalidArgument);
}

// A buffer registered with the router is registered with each endpoint that moves its kind, and a
// send or receive naming it reaches the peer's endpoint with that endpoint's own registration.
TEST(RoutingEndpointRegistrationTest, EachPeersEndpointGetsItsOwnRegistration) {
  std::unique_ptr<InMemoryFabric> primary_fabric = NewInMemoryFabric();
  std::unique_ptr<InMemoryFabric> fast_fabric = NewInMemoryFabric();
  std::unique_ptr<Endpoint> a_primary = *primary_fabric->CreateEndpoint("a");
  std::unique_ptr<Endpoint> c_primary = *primary_fabric->CreateEndpoint("c");
  std::unique_ptr<Endpoint> a_fast = *fast_fabric->CreateEndpoint("a-fast");
  std::unique_ptr<Endpoint> b_fast = *fast_fabric->CreateEndpoint("b-fast");
  test::RegisteredOnlyEndpoint primary(a_primary.get());
  test::RegisteredOnlyEndpoint fast(a_fast.get(), /*moves_device=*/true);
  RoutingEndpoint router({&primary, &fast});
  ASSERT_TRUE(router.AddRoute("b", &fast, "b-fast").ok());

  std::vector<std::byte> host = Bytes("host bytes");
  absl::StatusOr<std::unique_ptr<MemoryRegion>> region =
      router.RegisterMemory(host, MemoryKind::kHost);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(primary.live_regions(), 1u);
  EXPECT_EQ(fast.live_regions(), 1u);
  const RegionSlice slice{region->get(), 5, 5};
  ASSERT_TRUE(router.SendRegion("b", Tag{.seq = 1}, slice, Deadline()).ok());
  ASSERT_TRUE(router.SendRegion("c", Tag{.seq = 1}, slice, Deadline()).ok());
  std::vector<std::byte> received(5);
  ASSERT_TRUE(b_fast->Recv("a-fast", Tag{.seq = 1}, received, Deadline()).ok());
  EXPECT_EQ(received, Bytes("bytes"));
  ASSERT_TRUE(c_primary->Recv("a", Tag{.seq = 1}, received, Deadline()).ok());
  EXPECT_EQ(received, Bytes("bytes"));
  // Both went as registered memory (the test endpoints refuse regions not theirs).
  EXPECT_EQ(primary.raw_bytes(), 0u);
  EXPECT_EQ(fast.raw_bytes(), 0u);
  EXPECT_EQ(primary.region_bytes(), 5u);
  EXPECT_EQ(fast.region_bytes(), 5u);

  // A receive into the region, from the routed peer.
  ASSERT_TRUE(b_fast->Send("a-fast", Tag{.seq = 2}, Bytes("HOST!"), Deadline()).ok());
  ASSERT_TRUE(
      router.PostRecvRegion("b", Tag{.seq = 2}, RegionSlice{region->get(), 0, 5}, Deadline(), {})
          ->Wait()
          .ok());
  EXPECT_EQ(host, Bytes("HOST!bytes"));

  // Deregistered from both when the region goes.
  region->reset();
  EXPECT_EQ(primary.live_regions(), 0u);
  EXPECT_EQ(fast.live_regions(), 0u);
}

// Memory only some transports move: registered where it can be, moved directly only to peers
// whose transport moves it, and refused (not copied) to the others.
TEST(RoutingEndpointRegistrationTest, AKindOnlyOneTransportMovesGoesToItsPeersOnly) {
  std::unique_ptr<InMemoryFabric> primary_fabric = NewInMemoryFabric();
  std::unique_ptr<InMemoryFabric> fast_fabric = NewInMemoryFabric();
  std::unique_ptr<Endpoint> a_primary = *primary_fabric->CreateEndpoint("a");
  std::unique_ptr<Endpoint> a_fast = *fast_fabric->CreateEndpoint("a-fast");
  test::RegisteredOnlyEndpoint primary(a_primary.get());
  test::RegisteredOnlyEndpoint fast(a_fast.get(), /*moves_device=*/true);
  RoutingEndpoint router({&primary, &fast});
  ASSERT_TRUE(router.AddRoute("b", &fast, "b-fast").ok());

  EXPECT_TRUE(router.MovesDirectly("b", MemoryKind::kDevice));
  EXPECT_FALSE(router.MovesDirectly("c", MemoryKind::kDevice));
  EXPECT_TRUE(router.MovesDirectly("c", MemoryKind::kHost));

  std::vector<std::byte> device = Bytes("device");
  absl::StatusOr<std::unique_ptr<MemoryRegion>> region =
      router.RegisterMemory(device, MemoryKind::kDevice);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(primary.live_regions(), 0u);
  EXPECT_EQ(fast.live_regions(), 1u);
  const absl::Status refused =
      router.SendRegion("c", Tag{.seq = 1}, RegionSlice{region->get(), 0, 6}, Deadline());
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("cannot move device memory"));
  EXPECT_EQ(
      router.PostRecvRegion("c", Tag{.seq = 1}, RegionSlice{region->get(), 0, 6}, Deadline(), {})
          ->Wait()
          .code(),
      absl::StatusCode::kInvalidArgument);

  // No transport moves it at all: refused with what is missing.
  RoutingEndpoint host_only({&primary});
  absl::StatusOr<std::unique_ptr<MemoryRegion>> none =
      RoutingEndpoint({&primary, &primary}).RegisterMemory(device, MemoryKind::kDevice);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(host_only.RegisterMemory(device, MemoryKind::kDevice).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Connection data, posted sends, exposures and writes go by the peer's route too: b over the
// fast transport (whose links need connection data), c over the primary (which has none).
TEST_F(RoutingEndpointTest, NewCallsFollowTheRoute) {
  ASSERT_TRUE(router_->AddRoute("b", a_fast_.get(), "b-fast").ok());
  absl::StatusOr<std::string> ours = router_->ConnectionData("b");
  absl::StatusOr<std::string> theirs = b_fast_->ConnectionData("a-fast");
  ASSERT_TRUE(ours.ok() && theirs.ok());
  EXPECT_FALSE(ours->empty());
  EXPECT_EQ(*ours, *a_fast_->ConnectionData("b-fast"));
  ASSERT_TRUE(router_->Connect("b", *theirs).ok());
  ASSERT_TRUE(b_fast_->Connect("a-fast", *ours).ok());
  // The primary has no connection data: c's is empty, and only empty data connects.
  EXPECT_EQ(*router_->ConnectionData("c"), "");
  EXPECT_EQ(router_->Connect("c", "x").code(), absl::StatusCode::kInvalidArgument);

  std::vector<std::byte> memory = Bytes("0123456789");
  const std::unique_ptr<MemoryRegion> region = HostMemoryRegion(memory);
  ASSERT_TRUE(router_->PostSend("b", Tag{.seq = 1}, RegionSlice{region.get(), 0, 10}, Deadline())
                  ->Wait()
                  .ok());
  std::vector<std::byte> received(10);
  ASSERT_TRUE(b_fast_->Recv("a-fast", Tag{.seq = 1}, received, Deadline()).ok());
  EXPECT_EQ(received, memory);

  // b exposes a region to a over fast; the router writes it under b's plan name.
  std::vector<std::byte> target(10);
  const std::unique_ptr<MemoryRegion> target_region = HostMemoryRegion(target);
  std::unique_ptr<ExposedRegion> exposed =
      b_fast_->ExposeRegion("a-fast", 3, RegionSlice{target_region.get(), 0, 10}, Deadline());
  ASSERT_TRUE(router_
                  ->PostWrite("b", 3, RegionSlice{region.get(), 0, 10}, exposed->descriptor(), 0,
                              9u, Deadline())
                  ->Wait()
                  .ok());
  ASSERT_TRUE(exposed->Wait().ok());
  EXPECT_EQ(target, memory);
  // And a region the router exposes to b takes b's writes from its fast endpoint.
  std::vector<std::byte> mine(10);
  const std::unique_ptr<MemoryRegion> mine_region = HostMemoryRegion(mine);
  std::unique_ptr<ExposedRegion> exposed_here =
      router_->ExposeRegion("b", 3, RegionSlice{mine_region.get(), 0, 10}, Deadline());
  ASSERT_TRUE(b_fast_
                  ->PostWrite("a-fast", 3, RegionSlice{region.get(), 0, 10},
                              exposed_here->descriptor(), 0, 1u, Deadline())
                  ->Wait()
                  .ok());
  ASSERT_TRUE(exposed_here->Wait().ok());
  EXPECT_EQ(mine, memory);
}

}  // namespace
}  // namespace baton::transport
