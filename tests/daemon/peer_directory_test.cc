#include "daemon/peer_directory.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton::daemon {
namespace {

Member Daemon(int i) {
  return Member{"node-" + std::to_string(i),
                "10.0.0." + std::to_string(i) + ":7460",
                "10.0.0." + std::to_string(i) + ":7461",
                {}};
}

std::vector<std::string> Addresses(const std::vector<Member>& members) {
  std::vector<std::string> addresses;
  for (const Member& member : members) addresses.push_back(member.peer_address);
  return addresses;
}

TEST(PeerDirectoryTest, PlanPeersLingerThenGoConfiguredPeersStay) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  PeerDirectory directory(Daemon(0), {" 10.0.0.9:7460", "", "10.0.0.0:7460"}, absl::Minutes(5));
  // The configured peer is known at once; this daemon's own address is never a peer.
  EXPECT_EQ(Addresses(directory.Active(t0)), (std::vector<std::string>{"10.0.0.9:7460"}));

  directory.Update({Daemon(0), Daemon(1), Daemon(2)}, t0);
  EXPECT_EQ(Addresses(directory.Active(t0)),
            (std::vector<std::string>{"10.0.0.1:7460", "10.0.0.2:7460", "10.0.0.9:7460"}));
  EXPECT_EQ(directory.NameOf("10.0.0.2:7461"), "node-2");

  // Daemon 2's communicator ends at t0 + 1 min; daemon 1 stays in another one.
  directory.Update({Daemon(0), Daemon(1)}, t0 + absl::Minutes(1));
  EXPECT_EQ(directory.Active(t0 + absl::Minutes(5)).size(), 3u);  // still lingering
  EXPECT_EQ(Addresses(directory.Active(t0 + absl::Minutes(6))),
            (std::vector<std::string>{"10.0.0.1:7460", "10.0.0.9:7460"}));
  EXPECT_EQ(directory.NameOf("10.0.0.2:7461"), "10.0.0.2:7461");  // forgotten
}

TEST(PeerDirectoryTest, ProbesFillInConfiguredPeers) {
  PeerDirectory directory(Daemon(0), {"10.0.0.9:7460"}, absl::Minutes(5));
  EXPECT_EQ(directory.NameOf("10.0.0.9:7461"), "10.0.0.9:7461");
  Member nine = Daemon(9);
  nine.locality = {"pod-b", "rack-9"};
  directory.Learn("10.0.0.9:7460", nine);
  EXPECT_EQ(directory.NameOf("10.0.0.9:7461"), "node-9");
  const std::vector<Member> active = directory.Active(absl::Now());
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].node_name, "node-9");
  EXPECT_EQ(active[0].data_address, "10.0.0.9:7461");
  EXPECT_EQ(active[0].locality, (std::vector<std::string>{"pod-b", "rack-9"}));
  // Learning about an unknown peer adds nothing.
  directory.Learn("10.0.0.8:7460", Daemon(8));
  EXPECT_EQ(directory.Active(absl::Now()).size(), 1u);
}

TEST(PeerDirectoryTest, ACommunicatorThatEndsBetweenUpdatesStillLingers) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  PeerDirectory directory(Daemon(0), {}, absl::Minutes(5));
  directory.AddPlan({Daemon(0), Daemon(3)});
  // The next Update finds no communicator: daemon 3 lingers from then on.
  directory.Update({}, t0);
  EXPECT_EQ(Addresses(directory.Active(t0 + absl::Minutes(4))),
            (std::vector<std::string>{"10.0.0.3:7460"}));
  EXPECT_TRUE(directory.Active(t0 + absl::Minutes(5)).empty());
}

TEST(PeerDirectoryTest, ZeroLingerForgetsAtOnce) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  PeerDirectory directory(Daemon(0), {}, absl::ZeroDuration());
  directory.Update({Daemon(0), Daemon(1)}, t0);
  EXPECT_EQ(directory.Active(t0).size(), 1u);
  directory.Update({}, t0 + absl::Seconds(1));
  EXPECT_TRUE(directory.Active(t0 + absl::Seconds(1)).empty());
}

}  // namespace
}  // namespace baton::daemon
