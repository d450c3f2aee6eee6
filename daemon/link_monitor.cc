#include "daemon/link_monitor.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace baton::daemon {
namespace {

constexpr size_t kPingBytes = 64;

template <typename T>
T Median(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

template <typename T>
T WindowMedian(const std::deque<T>& window) {
  return Median(std::vector<T>(window.begin(), window.end()));
}

template <typename T>
void Push(std::deque<T>& window, T value) {
  window.push_back(value);
  while (window.size() > static_cast<size_t>(kWindow)) window.pop_front();
}

std::string PeerLabel(const Member& peer) {
  return peer.node_name.empty() ? peer.peer_address
                                : absl::StrFormat("%s (%s)", peer.node_name, peer.peer_address);
}

}  // namespace

void FlagLinks(std::vector<LinkHealth*>& links) {
  std::vector<double> bandwidths;
  std::vector<absl::Duration> rtts;
  for (const LinkHealth* link : links) {
    if (link->bandwidth > 0) bandwidths.push_back(link->bandwidth);
    if (link->rtt > absl::ZeroDuration()) rtts.push_back(link->rtt);
  }
  const bool compare_bandwidth = bandwidths.size() >= static_cast<size_t>(kMinLinksToCompare);
  const bool compare_rtt = rtts.size() >= static_cast<size_t>(kMinLinksToCompare);
  const double median_bandwidth = compare_bandwidth ? Median(bandwidths) : 0;
  const absl::Duration median_rtt = compare_rtt ? Median(rtts) : absl::ZeroDuration();
  for (LinkHealth* link : links) {
    link->flagged_bandwidth = compare_bandwidth && link->bandwidth > 0 &&
                              link->bandwidth < kBandwidthRatio * median_bandwidth;
    link->flagged_rtt = compare_rtt && link->rtt > absl::ZeroDuration() &&
                        link->rtt > kRttRatio * median_rtt && link->rtt - median_rtt >= kRttMargin;
  }
}

LinkMonitor::LinkMonitor(Options options, RoundTrip round_trip, PeerList peers, Learnt learnt,
                         DataRoundTrip data_round_trip)
    : options_(options),
      round_trip_(std::move(round_trip)),
      peers_(std::move(peers)),
      learnt_(std::move(learnt)),
      data_round_trip_(std::move(data_round_trip)) {}

LinkMonitor::~LinkMonitor() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void LinkMonitor::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

bool LinkMonitor::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void LinkMonitor::Start() {
  if (options_.interval <= absl::ZeroDuration()) return;
  thread_ = std::thread([this] {
    SetThreadName("baton-probes");
    Loop();
  });
}

void LinkMonitor::Loop() {
  while (true) {
    ProbeOnce();
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), options_.interval)) return;
  }
}

absl::StatusOr<Member> LinkMonitor::Measure(const std::string& peer_address, bool bulk,
                                            Measurement& measured, absl::Time deadline) const {
  measured = Measurement{};
  Member answered;
  std::vector<absl::Duration> pings;
  for (int i = 0; i < kPings; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<Member> who =
        round_trip_(peer_address, kPingBytes, start + options_.probe_timeout);
    if (!who.ok()) return who.status();
    pings.push_back(absl::Now() - start);
    answered = *std::move(who);
  }
  // The fastest of the pings: scheduling delays on either daemon only ever add time, so the
  // minimum is the link's own round trip (as ping's min and TCP's min_rtt take it).
  measured.rtt = *std::min_element(pings.begin(), pings.end());
  if (Stopping()) return absl::CancelledError("the link monitor is stopping");
  if (data_round_trip_ && !answered.data_address.empty()) {
    absl::Duration fastest = absl::InfiniteDuration();
    for (int i = 0; i < kPings; ++i) {
      absl::StatusOr<absl::Duration> rtt =
          data_round_trip_(answered.data_address, absl::Now() + options_.probe_timeout);
      if (!rtt.ok()) {
        // The peer API answered, so the link is up; the data RTT just stays unmeasured.
        spdlog::debug("data-plane round trip to {} failed: {}", answered.data_address,
                      rtt.status().ToString());
        fastest = absl::InfiniteDuration();
        break;
      }
      fastest = std::min(fastest, *rtt);
    }
    if (fastest != absl::InfiniteDuration()) measured.data_rtt = fastest;
  }
  if (!bulk) return answered;
  if (Stopping()) return absl::CancelledError("the link monitor is stopping");
  absl::Duration best = absl::InfiniteDuration();
  for (int i = 0; i < kBulkTransfers; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<Member> who = round_trip_(peer_address, options_.probe_bytes,
                                             std::min(deadline, start + options_.probe_timeout));
    if (!who.ok()) return who.status();
    best = std::min(best, absl::Now() - start);
  }
  // The transfer's own time: the round trip less one small message's.
  const absl::Duration transfer = best > measured.rtt ? best - measured.rtt : best;
  measured.bandwidth =
      static_cast<double>(options_.probe_bytes) / std::max(absl::ToDoubleSeconds(transfer), 1e-9);
  return answered;
}

void LinkMonitor::Record(const Member& peer, const absl::StatusOr<Member>& answered,
                         const Measurement& measured) {
  LinkHealth& link = links_[peer.peer_address];
  link.peer = peer;
  if (!answered.ok()) {
    if (link.up || link.probes_failed == 0) {
      spdlog::warn("link probe to {} failed: {}", PeerLabel(peer), answered.status().message());
    }
    link.up = false;
    ++link.probes_failed;
    link.last_error = std::string{answered.status().message()};
    return;
  }
  if (!answered->node_name.empty()) link.peer.node_name = answered->node_name;
  if (!answered->data_address.empty()) link.peer.data_address = answered->data_address;
  if (!answered->locality.empty()) link.peer.locality = answered->locality;
  if (!link.up && link.probes_failed > 0) {
    spdlog::info("link probe to {} succeeds again", PeerLabel(link.peer));
  }
  link.up = true;
  ++link.probes_ok;
  link.last_error.clear();
  Push(link.rtts, measured.rtt);
  link.rtt = WindowMedian(link.rtts);
  if (measured.data_rtt > absl::ZeroDuration()) {
    Push(link.data_rtts, measured.data_rtt);
    link.data_rtt = WindowMedian(link.data_rtts);
  }
  if (measured.bandwidth > 0) {
    Push(link.bandwidths, measured.bandwidth);
    link.bandwidth = WindowMedian(link.bandwidths);
    link.best_bandwidth = *std::max_element(link.bandwidths.begin(), link.bandwidths.end());
  }
}

LinkHealth LinkMonitor::MeasureAndRecord(const Member& peer, bool bulk, absl::Time deadline) {
  Measurement measured;
  absl::StatusOr<Member> answered = Measure(peer.peer_address, bulk, measured, deadline);
  if (answered.ok() && learnt_) learnt_(peer.peer_address, *answered);
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    // A probe cut short by Stop says nothing about the link.
    if (auto it = links_.find(peer.peer_address); it != links_.end()) return it->second;
    LinkHealth unmeasured;
    unmeasured.peer = peer;
    return unmeasured;
  }
  Record(peer, answered, measured);
  return links_[peer.peer_address];
}

std::vector<LinkHealth> LinkMonitor::Measured(const std::vector<Member>& peers,
                                              absl::Time deadline) {
  std::vector<LinkHealth> result;
  for (const Member& peer : peers) {
    {
      absl::MutexLock lock(&mu_);
      auto it = links_.find(peer.peer_address);
      if (it != links_.end() && it->second.bandwidth > 0) {
        result.push_back(it->second);
        continue;
      }
    }
    if (absl::Now() >= deadline) continue;
    result.push_back(MeasureAndRecord(peer, /*bulk=*/true, deadline));
  }
  return result;
}

void LinkMonitor::ProbeOnce() {
  const std::vector<Member> peers = peers_();
  size_t cursor = 0;
  {
    absl::MutexLock lock(&mu_);
    cursor = peers.empty() ? 0 : bulk_cursor_ % peers.size();
    bulk_cursor_ = cursor + kBulkPeersPerRound;
  }
  absl::flat_hash_set<std::string> current;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (Stopping()) return;
    const Member& peer = peers[i];
    current.insert(peer.peer_address);
    const bool bulk = (i + peers.size() - cursor) % peers.size() < kBulkPeersPerRound;
    MeasureAndRecord(peer, bulk, absl::InfiniteFuture());
  }

  absl::MutexLock lock(&mu_);
  absl::erase_if(links_, [&](const auto& item) { return !current.contains(item.first); });
  std::vector<LinkHealth*> links;
  std::vector<std::pair<bool, bool>> before;
  for (auto& [address, link] : links_) {
    links.push_back(&link);
    before.emplace_back(link.flagged_bandwidth, link.flagged_rtt);
  }
  FlagLinks(links);
  for (size_t i = 0; i < links.size(); ++i) {
    const LinkHealth& link = *links[i];
    if (link.flagged_bandwidth != before[i].first) {
      if (link.flagged_bandwidth) {
        spdlog::warn(
            "link to {} flagged: bandwidth {:.1f} MB/s is far below this daemon's other "
            "links",
            PeerLabel(link.peer), link.bandwidth / 1e6);
      } else {
        spdlog::info("link to {} no longer flagged for bandwidth ({:.1f} MB/s)",
                     PeerLabel(link.peer), link.bandwidth / 1e6);
      }
    }
    if (link.flagged_rtt != before[i].second) {
      if (link.flagged_rtt) {
        spdlog::warn("link to {} flagged: RTT {} is far above this daemon's other links",
                     PeerLabel(link.peer), absl::FormatDuration(link.rtt));
      } else {
        spdlog::info("link to {} no longer flagged for RTT ({})", PeerLabel(link.peer),
                     absl::FormatDuration(link.rtt));
      }
    }
  }
}

std::vector<LinkHealth> LinkMonitor::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<LinkHealth> result;
  for (const auto& [address, link] : links_) result.push_back(link);
  std::sort(result.begin(), result.end(), [](const LinkHealth& a, const LinkHealth& b) {
    return a.peer.peer_address < b.peer.peer_address;
  });
  return result;
}

}  // namespace baton::daemon
