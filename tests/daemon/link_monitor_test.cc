#include "daemon/link_monitor.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace baton::daemon {
namespace {

LinkHealth Link(double bandwidth, absl::Duration rtt) {
  LinkHealth link;
  link.bandwidth = bandwidth;
  link.rtt = rtt;
  return link;
}

std::vector<LinkHealth*> Pointers(std::vector<LinkHealth>& links) {
  std::vector<LinkHealth*> result;
  for (LinkHealth& link : links) result.push_back(&link);
  return result;
}

TEST(FlagLinksTest, FlagsOnlyTheLinkFarBelowTheMedianBandwidth) {
  std::vector<LinkHealth> links = {
      Link(1.0e9, absl::Microseconds(50)), Link(1.1e9, absl::Microseconds(50)),
      Link(0.3e9, absl::Microseconds(50)), Link(0.9e9, absl::Microseconds(50))};
  std::vector<LinkHealth*> view = Pointers(links);
  FlagLinks(view);
  EXPECT_FALSE(links[0].flagged_bandwidth);
  EXPECT_FALSE(links[1].flagged_bandwidth);
  EXPECT_TRUE(links[2].flagged_bandwidth);
  EXPECT_FALSE(links[3].flagged_bandwidth);
  for (const LinkHealth& link : links) EXPECT_FALSE(link.flagged_rtt);
}

TEST(FlagLinksTest, JustAboveHalfTheMedianIsNotFlagged) {
  std::vector<LinkHealth> links = {Link(1.0e9, absl::Microseconds(50)),
                                   Link(1.0e9, absl::Microseconds(50)),
                                   Link(0.51e9, absl::Microseconds(50))};
  std::vector<LinkHealth*> view = Pointers(links);
  FlagLinks(view);
  EXPECT_FALSE(links[2].flagged_bandwidth);
  links[2].bandwidth = 0.49e9;
  FlagLinks(view);
  EXPECT_TRUE(links[2].flagged_bandwidth);
}

TEST(FlagLinksTest, NeedsThreeMeasuredLinksToCompare) {
  std::vector<LinkHealth> links = {Link(1.0e9, absl::Microseconds(50)),
                                   Link(0.1e9, absl::Milliseconds(20)),
                                   Link(0, absl::ZeroDuration())};  // never measured
  std::vector<LinkHealth*> view = Pointers(links);
  FlagLinks(view);
  for (const LinkHealth& link : links) {
    EXPECT_FALSE(link.flagged_bandwidth);
    EXPECT_FALSE(link.flagged_rtt);
  }
}

TEST(FlagLinksTest, RttNeedsBothTheRatioAndTheMargin) {
  // 4x the median but only 150 us more: within noise, not flagged.
  std::vector<LinkHealth> links = {Link(1e9, absl::Microseconds(50)),
                                   Link(1e9, absl::Microseconds(50)),
                                   Link(1e9, absl::Microseconds(200))};
  std::vector<LinkHealth*> view = Pointers(links);
  FlagLinks(view);
  EXPECT_FALSE(links[2].flagged_rtt);
  // 2 ms more than the median and 40x: flagged, and only that one.
  links[2].rtt = absl::Microseconds(2050);
  FlagLinks(view);
  EXPECT_TRUE(links[2].flagged_rtt);
  EXPECT_FALSE(links[0].flagged_rtt);
  EXPECT_FALSE(links[1].flagged_rtt);
  // A slow network everywhere is not any one link's fault.
  for (LinkHealth& link : links) link.rtt = absl::Milliseconds(5);
  FlagLinks(view);
  for (const LinkHealth& link : links) EXPECT_FALSE(link.flagged_rtt);
}

// Peers simulated by the round-trip function: each answers after a delay that grows with the
// bytes sent, at its own "bandwidth".
class FakePeers {
 public:
  void Add(const std::string& address, absl::Duration per_mib, bool reachable = true) {
    absl::MutexLock lock(&mu_);
    peers_[address] = Peer{per_mib, reachable};
  }
  void SetReachable(const std::string& address, bool reachable) {
    absl::MutexLock lock(&mu_);
    peers_[address].reachable = reachable;
  }
  std::vector<Member> List() {
    absl::MutexLock lock(&mu_);
    std::vector<Member> members;
    for (const auto& [address, peer] : peers_) members.push_back(Member{"", address, "", {}});
    return members;
  }
  void Remove(const std::string& address) {
    absl::MutexLock lock(&mu_);
    peers_.erase(address);
  }
  int bulk_probes(const std::string& address) {
    absl::MutexLock lock(&mu_);
    return bulk_[address];
  }

  absl::StatusOr<Member> RoundTrip(const std::string& address, size_t bytes, absl::Time deadline) {
    Peer peer;
    {
      absl::MutexLock lock(&mu_);
      auto it = peers_.find(address);
      if (it == peers_.end()) return absl::NotFoundError("no such peer");
      peer = it->second;
      if (bytes > 4096) ++bulk_[address];
    }
    if (!peer.reachable) return absl::UnavailableError(absl::StrCat(address, " refused"));
    absl::SleepFor(peer.per_mib * (static_cast<double>(bytes) / (1 << 20)));
    return Member{"name-of-" + address, address, "data-of-" + address, {}};
  }

 private:
  struct Peer {
    absl::Duration per_mib;
    bool reachable = true;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> bulk_ ABSL_GUARDED_BY(mu_);
};

LinkMonitor::Options TestOptions() {
  LinkMonitor::Options options;
  options.interval = absl::ZeroDuration();  // rounds only when the test asks
  options.probe_bytes = 1 << 20;
  options.probe_timeout = absl::Seconds(5);
  return options;
}

TEST(LinkMonitorTest, MeasuresEveryPeerAndFlagsTheSlowOne) {
  FakePeers peers;
  peers.Add("a:1", absl::Milliseconds(2));
  peers.Add("b:1", absl::Milliseconds(2));
  peers.Add("c:1", absl::Milliseconds(2));
  peers.Add("slow:1", absl::Milliseconds(40));  // 20x slower
  std::atomic<int> learnt{0};
  LinkMonitor monitor(
      TestOptions(),
      [&](const std::string& a, size_t b, absl::Time d) { return peers.RoundTrip(a, b, d); },
      [&] { return peers.List(); },
      [&](const std::string& address, const Member& member) {
        EXPECT_EQ(member.node_name, "name-of-" + address);
        ++learnt;
      });
  // A window of three rounds: one slow measurement of a fast link (a loaded machine) cannot
  // flag it, the median drops it.
  for (int round = 0; round < 3; ++round) monitor.ProbeOnce();
  EXPECT_EQ(learnt.load(), 12);
  const std::vector<LinkHealth> links = monitor.Snapshot();
  ASSERT_EQ(links.size(), 4u);
  for (const LinkHealth& link : links) {
    SCOPED_TRACE(link.peer.peer_address);
    EXPECT_TRUE(link.up);
    EXPECT_EQ(link.probes_ok, 3u);
    EXPECT_EQ(link.probes_failed, 0u);
    EXPECT_GT(link.rtt, absl::ZeroDuration());
    EXPECT_GT(link.bandwidth, 0);
    EXPECT_EQ(link.peer.node_name, "name-of-" + link.peer.peer_address);
    EXPECT_EQ(link.peer.data_address, "data-of-" + link.peer.peer_address);
    EXPECT_EQ(link.flagged_bandwidth, link.peer.peer_address == "slow:1");
  }
}

// The data RTT: the fastest of the data-plane round trips to the address the peer API gave, a
// median over rounds; unmeasured where the data plane does not answer, and the link stays up.
TEST(LinkMonitorTest, MeasuresTheDataPlaneRoundTripWhereItAnswers) {
  FakePeers peers;
  peers.Add("a:1", absl::Milliseconds(2));
  peers.Add("mute:1", absl::Milliseconds(2));
  absl::Mutex mu;
  std::vector<std::string> pinged;
  int calls = 0;
  LinkMonitor monitor(
      TestOptions(),
      [&](const std::string& a, size_t b, absl::Time d) { return peers.RoundTrip(a, b, d); },
      [&] { return peers.List(); }, nullptr,
      [&](const std::string& data_address, absl::Time) -> absl::StatusOr<absl::Duration> {
        absl::MutexLock lock(&mu);
        pinged.push_back(data_address);
        if (data_address == "data-of-mute:1") return absl::UnimplementedError("no pings here");
        // The fastest of each round's five is 10 us.
        constexpr int kMicroseconds[] = {40, 30, 20, 10, 50};
        return absl::Microseconds(kMicroseconds[calls++ % 5]);
      });
  for (int round = 0; round < 2; ++round) monitor.ProbeOnce();
  for (const LinkHealth& link : monitor.Snapshot()) {
    SCOPED_TRACE(link.peer.peer_address);
    EXPECT_TRUE(link.up);
    EXPECT_EQ(link.data_rtt,
              link.peer.peer_address == "a:1" ? absl::Microseconds(10) : absl::ZeroDuration());
  }
  absl::MutexLock lock(&mu);
  // Five to the answering peer each round; the mute one gives up at the first.
  EXPECT_EQ(std::count(pinged.begin(), pinged.end(), "data-of-a:1"), 10);
  EXPECT_EQ(std::count(pinged.begin(), pinged.end(), "data-of-mute:1"), 2);
}

TEST(LinkMonitorTest, AnUnreachablePeerIsDownAndTheOthersStillMeasured) {
  FakePeers peers;
  peers.Add("a:1", absl::Milliseconds(1));
  peers.Add("b:1", absl::Milliseconds(1));
  peers.Add("gone:1", absl::Milliseconds(1), /*reachable=*/false);
  LinkMonitor monitor(
      TestOptions(),
      [&](const std::string& a, size_t b, absl::Time d) { return peers.RoundTrip(a, b, d); },
      [&] { return peers.List(); }, nullptr);
  monitor.ProbeOnce();
  for (const LinkHealth& link : monitor.Snapshot()) {
    SCOPED_TRACE(link.peer.peer_address);
    if (link.peer.peer_address == "gone:1") {
      EXPECT_FALSE(link.up);
      EXPECT_EQ(link.probes_failed, 1u);
      EXPECT_EQ(link.last_error, "gone:1 refused");
    } else {
      EXPECT_TRUE(link.up);
      EXPECT_GT(link.bandwidth, 0);
    }
  }
  peers.SetReachable("gone:1", true);
  monitor.ProbeOnce();
  for (const LinkHealth& link : monitor.Snapshot()) {
    EXPECT_TRUE(link.up) << link.peer.peer_address;
    EXPECT_TRUE(link.last_error.empty());
  }
}

TEST(LinkMonitorTest, BulkProbesRotateSoEachRoundCostsAtMostFourTransfers) {
  FakePeers peers;
  for (int i = 0; i < 6; ++i) peers.Add(absl::StrCat("p", i, ":1"), absl::Microseconds(100));
  LinkMonitor monitor(
      TestOptions(),
      [&](const std::string& a, size_t b, absl::Time d) { return peers.RoundTrip(a, b, d); },
      [&] { return peers.List(); }, nullptr);
  monitor.ProbeOnce();
  int measured = 0;
  int total_bulk = 0;
  for (const LinkHealth& link : monitor.Snapshot()) measured += link.bandwidth > 0 ? 1 : 0;
  for (int i = 0; i < 6; ++i) total_bulk += peers.bulk_probes(absl::StrCat("p", i, ":1"));
  EXPECT_EQ(measured, kBulkPeersPerRound);
  EXPECT_EQ(total_bulk, kBulkPeersPerRound * kBulkTransfers);
  monitor.ProbeOnce();
  for (const LinkHealth& link : monitor.Snapshot()) {
    EXPECT_GT(link.bandwidth, 0) << link.peer.peer_address << " never bulk-probed";
  }
}

TEST(LinkMonitorTest, APeerThatLeavesTheListLeavesTheSnapshot) {
  FakePeers peers;
  peers.Add("a:1", absl::Microseconds(100));
  peers.Add("b:1", absl::Microseconds(100));
  LinkMonitor monitor(
      TestOptions(),
      [&](const std::string& a, size_t b, absl::Time d) { return peers.RoundTrip(a, b, d); },
      [&] { return peers.List(); }, nullptr);
  monitor.ProbeOnce();
  EXPECT_EQ(monitor.Snapshot().size(), 2u);
  peers.Remove("b:1");
  monitor.ProbeOnce();
  ASSERT_EQ(monitor.Snapshot().size(), 1u);
  EXPECT_EQ(monitor.Snapshot()[0].peer.peer_address, "a:1");
}

// Stop ends the round in progress: the probe it cut short (here: the round trip fails once
// stopped, as PeerClient::Stop makes it) is not recorded as a failure, and no peer after it
// is probed.
TEST(LinkMonitorTest, StopEndsTheRoundWithoutRecordingTheProbeItCut) {
  absl::Mutex mu;
  bool stopped = false;
  int probed = 0;
  LinkMonitor* monitor_ptr = nullptr;
  FakePeers peers;
  peers.Add("a:1", absl::Milliseconds(1));
  peers.Add("b:1", absl::Milliseconds(1));
  LinkMonitor monitor(
      TestOptions(),
      [&](const std::string& address, size_t bytes, absl::Time deadline) -> absl::StatusOr<Member> {
        {
          absl::MutexLock lock(&mu);
          if (stopped) return absl::CancelledError("stopped");
          if (++probed == 2) {  // the first peer's second ping: stop mid-measurement
            stopped = true;
            monitor_ptr->Stop();
            return absl::CancelledError("stopped");
          }
        }
        return peers.RoundTrip(address, bytes, deadline);
      },
      [&] { return peers.List(); }, nullptr);
  monitor_ptr = &monitor;
  monitor.ProbeOnce();
  EXPECT_TRUE(monitor.Snapshot().empty()) << "nothing recorded, no failure counted";
  absl::MutexLock lock(&mu);
  EXPECT_EQ(probed, 2) << "no peer probed after Stop";
}

TEST(LinkMonitorTest, BackgroundThreadProbesAndStopsPromptly) {
  FakePeers peers;
  peers.Add("a:1", absl::Microseconds(100));
  LinkMonitor::Options options = TestOptions();
  options.interval = absl::Milliseconds(20);
  auto monitor = std::make_unique<LinkMonitor>(
      options,
      [&](const std::string& a, size_t b, absl::Time d) { return peers.RoundTrip(a, b, d); },
      [&] { return peers.List(); }, nullptr);
  monitor->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline &&
         (monitor->Snapshot().empty() || monitor->Snapshot()[0].probes_ok < 3)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_FALSE(monitor->Snapshot().empty());
  EXPECT_GE(monitor->Snapshot()[0].probes_ok, 3u);
  monitor.reset();  // joins the thread; the test's timeout catches a hang
}

}  // namespace
}  // namespace baton::daemon
