#pragma once

// Background probes of the links to peer daemons, and link-health flagging.
//
// Every `interval` the monitor probes each known peer over the peer API: `kPings` small round
// trips (the fastest is the link's RTT) and, for at most `kBulkPeersPerRound` peers per round in
// turn, `kBulkTransfers` transfers of `probe_bytes` (the best gives the bandwidth); and, where it
// is given a data-plane round trip, `kPings` of those to the peer's data address (the fastest is
// the data RTT, what the tuner takes a message's latency from). Cost is bounded: per interval,
// peers * kPings * ~150 bytes plus kBulkPeersPerRound * kBulkTransfers * probe_bytes, whatever
// the cluster's size.
//
// A link's RTT and bandwidth are the medians of its last `kWindow` measurements. A link is
// flagged when, among at least kMinLinksToCompare measured links of this daemon, its bandwidth
// is below kBandwidthRatio times their median, or its RTT above kRttRatio times their median
// and at least kRttMargin more. Flags change with a log line. The daemon exports all of it as
// metrics, and `baton links` shows it.

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/plan.h"
#include "transport/transport.h"

namespace baton::daemon {

inline constexpr int kPings = 5;
inline constexpr int kBulkTransfers = 2;
inline constexpr int kBulkPeersPerRound = 4;
inline constexpr int kWindow = 5;
inline constexpr int kMinLinksToCompare = 3;
inline constexpr double kBandwidthRatio = 0.5;
inline constexpr double kRttRatio = 3.0;
inline constexpr absl::Duration kRttMargin = absl::Milliseconds(1);

// A link's data-plane counters as operators see them (/metrics, baton links): the transport's
// LinkStats, with the counters only some transports have (TCP's retransmits, checksum and seal
// failures) by name, 0 where the link's transport has none.
struct LinkTraffic {
  std::string peer;  // the peer's data address
  uint64_t tx_bytes = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_messages = 0;
  uint64_t rx_messages = 0;
  uint64_t errors = 0;
  uint64_t retransmits = 0;        // LinkStats counter "retransmits"
  uint64_t refused_messages = 0;   // LinkStats counter "refused_messages"
  uint64_t checksum_failures = 0;  // LinkStats counter "checksum_failures"
  uint64_t seal_failures = 0;      // LinkStats counter "seal_failures"
  bool up = false;
  uint64_t credit_violations = 0;  // LinkStats counter "credit_violations"
  uint64_t refused_writes = 0;     // LinkStats counter "refused_writes"

  static LinkTraffic From(const transport::LinkStats& stats) {
    return LinkTraffic{stats.peer,
                       stats.tx_bytes,
                       stats.rx_bytes,
                       stats.tx_messages,
                       stats.rx_messages,
                       stats.errors,
                       stats.Counter("retransmits"),
                       stats.Counter("refused_messages"),
                       stats.Counter("checksum_failures"),
                       stats.Counter("seal_failures"),
                       stats.up,
                       stats.Counter("credit_violations"),
                       stats.Counter("refused_writes")};
  }
};

// What the monitor knows about the link to one peer.
struct LinkHealth {
  Member peer;                 // as last learnt (a probe answer fills in name and data address)
  bool up = false;             // the peer answered the last probe
  absl::Duration rtt;          // median of the window; zero before the first measurement
  absl::Duration data_rtt;     // over the data plane, likewise; zero where not measured
  double bandwidth = 0;        // bytes per second, median of the window; 0 before the first
  double best_bandwidth = 0;   // the window's highest: the link's capacity when idle
  uint64_t probes_ok = 0;      // probe rounds that succeeded
  uint64_t probes_failed = 0;  // probe rounds that failed
  std::string last_error;      // of the last failed round, if the last round failed
  bool flagged_bandwidth = false;
  bool flagged_rtt = false;
  std::deque<absl::Duration> rtts;  // the window, oldest first
  std::deque<absl::Duration> data_rtts;
  std::deque<double> bandwidths;
};

// Sets the flags of `links` from their current RTT and bandwidth (rules above). Pure.
void FlagLinks(std::vector<LinkHealth*>& links);

class LinkMonitor {
 public:
  // One probe round trip to the daemon at `peer_address` carrying `send_bytes`; returns who
  // answered. Must honour the deadline.
  using RoundTrip = std::function<absl::StatusOr<Member>(const std::string& peer_address,
                                                         size_t send_bytes, absl::Time deadline)>;
  // One small round trip over the data plane to the endpoint at `data_address`
  // (transport::Endpoint::RoundTrip). Must honour the deadline.
  using DataRoundTrip = std::function<absl::StatusOr<absl::Duration>(
      const std::string& data_address, absl::Time deadline)>;
  // The peers to probe now.
  using PeerList = std::function<std::vector<Member>()>;
  // Told what a probe learnt about a peer.
  using Learnt = std::function<void(const std::string& peer_address, const Member& member)>;

  struct Options {
    absl::Duration interval = absl::Seconds(10);  // zero: never probe in the background
    size_t probe_bytes = size_t{1} << 20;
    absl::Duration probe_timeout = absl::Seconds(5);
  };

  // Without `data_round_trip` (null) the data RTT stays unmeasured.
  LinkMonitor(Options options, RoundTrip round_trip, PeerList peers, Learnt learnt,
              DataRoundTrip data_round_trip = nullptr);
  ~LinkMonitor();  // stops the background thread
  LinkMonitor(const LinkMonitor&) = delete;
  LinkMonitor& operator=(const LinkMonitor&) = delete;

  // Starts probing every interval in the background (no-op when interval is zero).
  void Start();
  // Ends background probing after the measurement in progress, which is not recorded (shutdown;
  // the round trip functions should fail fast from now on). The destructor calls it.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one round now, on the calling thread.
  void ProbeOnce() ABSL_LOCKS_EXCLUDED(mu_);
  // The links to `peers`, measuring (RTT and bandwidth, one measurement each) those not measured
  // yet, one after another until `deadline`; the rest are returned as they are (possibly
  // unmeasured). Measurements join the cache that ProbeOnce keeps.
  std::vector<LinkHealth> Measured(const std::vector<Member>& peers, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The links to the peers probed in the last round, by peer address.
  std::vector<LinkHealth> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One measurement of a peer: zero where not measured.
  struct Measurement {
    absl::Duration rtt;
    absl::Duration data_rtt;
    double bandwidth = 0;
  };
  // Measures one peer: its RTT, its data RTT where the data plane answers, and, if `bulk`, its
  // bandwidth.
  absl::StatusOr<Member> Measure(const std::string& peer_address, bool bulk, Measurement& measured,
                                 absl::Time deadline) const;
  // Measures `peer` (with a bandwidth probe if `bulk`), records it and returns the link.
  LinkHealth MeasureAndRecord(const Member& peer, bool bulk, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records one measurement (or failure) of `peer`.
  void Record(const Member& peer, const absl::StatusOr<Member>& answered,
              const Measurement& measured) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();
  bool Stopping() const ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const RoundTrip round_trip_;
  const PeerList peers_;
  const Learnt learnt_;
  const DataRoundTrip data_round_trip_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, LinkHealth> links_ ABSL_GUARDED_BY(mu_);
  size_t bulk_cursor_ ABSL_GUARDED_BY(mu_) = 0;  // next peer index (sorted) to bulk-probe
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace baton::daemon
