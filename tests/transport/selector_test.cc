#include "transport/selector.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/transport.h"

namespace baton::transport {
namespace {

using ::testing::HasSubstr;

// A transport that reaches the peers `reaches` accepts, among those advertising its name.
class FakeTransport final : public Transport {
 public:
  FakeTransport(std::string name, std::function<bool(const PeerInfo&, const PeerInfo&)> reaches)
      : name_(std::move(name)), reaches_(std::move(reaches)) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<std::unique_ptr<Endpoint>> Listen() override {
    return absl::UnimplementedError("fake");
  }
  bool CanReach(const PeerInfo& self, const PeerInfo& peer) const override {
    return peer.Find(name_) != nullptr && reaches_(self, peer);
  }

 private:
  const std::string name_;
  const std::function<bool(const PeerInfo&, const PeerInfo&)> reaches_;
};

PeerInfo Daemon(const std::string& node, std::vector<TransportAddress> transports) {
  return PeerInfo{node, {}, std::move(transports)};
}

class SelectorTest : public ::testing::Test {
 protected:
  // "local" reaches only daemons on the same node (as shared memory will); "wide" every one.
  FakeTransport local_{"local", [](const PeerInfo& self, const PeerInfo& peer) {
                         return self.node_name == peer.node_name;
                       }};
  FakeTransport wide_{"wide", [](const PeerInfo&, const PeerInfo&) { return true; }};
  std::vector<Transport*> preference_{&local_, &wide_};
  PeerInfo self_ = Daemon("node-a", {{"local", "a-local"}, {"wide", "a:1"}});
};

TEST_F(SelectorTest, PrefersTheFirstTransportThatReachesThePeer) {
  const PeerInfo same_node = Daemon("node-a", {{"local", "a2-local"}, {"wide", "a:2"}});
  absl::StatusOr<SelectedTransport> selected = SelectTransport(preference_, self_, same_node);
  ASSERT_TRUE(selected.ok()) << selected.status();
  EXPECT_EQ(selected->transport, &local_);
  EXPECT_EQ(selected->address, "a2-local");
}

TEST_F(SelectorTest, FallsBackWhereThePreferredOneCannotReach) {
  const PeerInfo other_node = Daemon("node-b", {{"local", "b-local"}, {"wide", "b:1"}});
  absl::StatusOr<SelectedTransport> selected = SelectTransport(preference_, self_, other_node);
  ASSERT_TRUE(selected.ok()) << selected.status();
  EXPECT_EQ(selected->transport, &wide_);
  EXPECT_EQ(selected->address, "b:1");
}

TEST_F(SelectorTest, SkipsATransportThePeerDoesNotAdvertise) {
  const PeerInfo same_node_wide_only = Daemon("node-a", {{"wide", "a:3"}});
  absl::StatusOr<SelectedTransport> selected =
      SelectTransport(preference_, self_, same_node_wide_only);
  ASSERT_TRUE(selected.ok()) << selected.status();
  EXPECT_EQ(selected->transport, &wide_);
  EXPECT_EQ(selected->address, "a:3");
}

TEST_F(SelectorTest, FailsNamingThePeerAndWhatItOffers) {
  const PeerInfo unreachable = Daemon("node-c", {{"local", "c-local"}, {"verbs", "mlx5_0:1"}});
  absl::StatusOr<SelectedTransport> selected = SelectTransport(preference_, self_, unreachable);
  ASSERT_EQ(selected.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(selected.status().message(), HasSubstr("node-c"));
  EXPECT_THAT(selected.status().message(), HasSubstr("local at c-local, verbs at mlx5_0:1"));
  EXPECT_THAT(selected.status().message(), HasSubstr("(local, wide)"));
}

TEST_F(SelectorTest, FailsForAPeerThatOffersNothing) {
  absl::StatusOr<SelectedTransport> selected =
      SelectTransport(preference_, self_, Daemon("node-d", {}));
  ASSERT_EQ(selected.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(selected.status().message(), HasSubstr("node-d, which offers no transport"));
}

}  // namespace
}  // namespace baton::transport
