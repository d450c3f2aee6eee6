#include "daemon/node.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collective/data_type.h"
#include "collective/schedule.h"
#include "common/log_limiter.h"
#include "common/secure_random.h"
#include "common/status_macros.h"
#include "daemon/comm_proof.h"
#include "spdlog/spdlog.h"

namespace baton::daemon {
namespace {

// The kernels read and write a buffer's elements in place, as their type. Buffers are mapped
// page-aligned, so a region that starts a whole number of elements in is aligned; any other
// offset would make every access misaligned: undefined behaviour (UBSan reports it in the
// reduction kernels), and a fault wherever a compiler's vectorised loop assumes the alignment.
absl::Status CheckElementOffset(const char* side, uint64_t offset, collective::DataType type) {
  const uint64_t element = collective::DataTypeSize(type);
  if (offset % element == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(side, " offset ", offset, " is not a multiple of ",
                                                 element, " bytes, the size of ",
                                                 collective::DataTypeName(type)));
}

}  // namespace

absl::StatusOr<CommId> ParseCommId(const std::string& text) {
  // First, so that the messages below may quote the id: it is printable and bounded.
  BATON_RETURN_IF_ERROR(CheckCommIdText(text));
  // Messages quote at most the start of what the caller sent.
  const std::string quoted = text.size() <= 64 ? text : text.substr(0, 64) + "...";
  const size_t slash = text.rfind('/');
  if (slash == std::string::npos || slash == 0) {
    return absl::InvalidArgumentError(absl::StrCat("malformed communicator id '", quoted,
                                                   "': expected <root address>/<32 hex digits>"));
  }
  absl::StatusOr<std::string> secret = CanonicalCommSecret(text.substr(slash + 1));
  if (!secret.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed communicator id '", quoted, "': the secret must be 32 hex digits"));
  }
  return CommId{text.substr(0, slash), *std::move(secret)};
}

absl::Status CheckWorld(int world_size, int rank, int64_t max_world_size) {
  if (world_size < 1 || world_size > max_world_size) {
    return absl::InvalidArgumentError(absl::StrCat("world size must be between 1 and ",
                                                   max_world_size, " (max_world_size), got ",
                                                   world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range for world size ", world_size));
  }
  return absl::OkStatus();
}

Node::Node(const Config& config, Member self, transport::Endpoint* endpoint, OpObserver* observer,
           NodeTopology topology, const PeerTlsCredentials& credentials, TransportSelector select,
           std::unique_ptr<device::Device> device)
    : config_(config),
      self_(std::move(self)),
      endpoint_(endpoint),
      select_(std::move(select)),
      observer_(observer),
      topology_(std::move(topology)),
      rendezvous_(
          [this](Plan& plan) { FinishPlan(plan); },
          Rendezvous::Limits{config.comm_id_ttl, static_cast<size_t>(config.max_pending_comm_ids),
                             static_cast<size_t>(config.max_pending_comm_ids_per_uid)}),
      device_(std::move(device)),
      sessions_(
          SessionLimits{
              static_cast<int>(config.max_sessions), static_cast<int>(config.max_sessions_per_uid),
              static_cast<int>(config.max_buffers_per_session),
              static_cast<int>(config.max_buffers_per_uid), static_cast<int>(config.max_buffers),
              static_cast<uint64_t>(config.max_mapped_bytes_per_session),
              static_cast<uint64_t>(config.max_mapped_bytes_per_uid),
              static_cast<uint64_t>(config.max_mapped_bytes),
              static_cast<int>(config.max_ranks_per_session),
              static_cast<int>(config.max_ranks_per_uid), static_cast<int>(config.max_ranks)},
          device_.get(), endpoint_),
      scratch_(endpoint_, kScratchKeepBytes),
      operation_devices_(
          device_ == nullptr
              ? nullptr
              : std::make_unique<device::OperationDevices>(
                    device_.get(), kStagingKeepBytes,
                    [this](std::byte* data, size_t bytes) -> absl::StatusOr<std::shared_ptr<void>> {
                      BATON_ASSIGN_OR_RETURN(
                          std::unique_ptr<transport::MemoryRegion> region,
                          endpoint_->RegisterMemory(transport::ByteSpan(data, bytes),
                                                    transport::MemoryKind::kHost));
                      return staging_regions_.Hold(std::move(region));
                    })),
      peers_(credentials),
      directory_(self_, absl::StrSplit(config.probe_peers, ',', absl::SkipWhitespace()),
                 config.peer_linger),
      communicators_([this](const Plan& plan) -> absl::StatusOr<std::shared_ptr<Communicator>> {
        const int index = plan.IndexOf(self_.data_address);
        if (index < 0) {
          return absl::InternalError("the communicator's plan does not include this daemon");
        }
        if (plan.chunk_bytes != 0) {
          BATON_RETURN_IF_ERROR(CheckChunkBytes(plan.chunk_bytes, "the communicator's plan"));
        }
        std::vector<Member> members;
        std::vector<std::string> addresses;
        for (const PlanDaemon& daemon : plan.daemons) {
          members.push_back(daemon.member);
          addresses.push_back(daemon.member.data_address);
          if (select_ && daemon.member.data_address != self_.data_address) {
            BATON_RETURN_IF_ERROR(select_(daemon.member));
          }
        }
        directory_.AddPlan(members);
        // The data plane takes this communicator's messages from its plan's daemons only (after
        // the routes above, which name the endpoint each is reached by).
        endpoint_->Restrict(plan.comm_tag, addresses);
        CommunicatorOptions options;
        options.op_timeout = config_.op_timeout;
        options.chunk_bytes =
            static_cast<size_t>(plan.chunk_bytes > 0 ? plan.chunk_bytes : config_.chunk_bytes);
        options.learn_algorithms = !plan.model_only;
        if (options.learn_algorithms) {
          options.on_measured = [this, key = plan.TunerKey()](std::vector<int64_t> agreed) {
            RememberMeasured(key, std::move(agreed));
          };
        }
        options.scratch = &scratch_;
        options.staging_regions = &staging_regions_;
        options.explain_failure = [this, plan](const absl::Status& failure, absl::Time started) {
          return ExplainFailure(plan, failure, started);
        };
        options.completed_total = &collectives_completed_;
        options.observer = observer_;
        return std::make_shared<Communicator>(
            plan, index, endpoint_, options, [this](const Plan& p, const AbortNotice& notice) {
              AbortNotice bounded = notice;
              bounded.reason = absl::Status(notice.reason.code(),
                                            notice.reason.message().substr(0, kMaxAbortMessage));
              const std::string proof = AbortProof(p.secret, p.comm_tag, bounded, self_.node_name);
              for (const PlanDaemon& daemon : p.daemons) {
                if (daemon.member.data_address == self_.data_address) continue;
                peers_.AbortAsync(daemon.member.peer_address, p.comm_tag, bounded, self_.node_name,
                                  proof);
              }
            });
      }),
      monitor_(
          LinkMonitor::Options{config.probe_interval, static_cast<size_t>(config.probe_bytes),
                               std::min(config.probe_interval, absl::Seconds(5))},
          [this](const std::string& address, size_t bytes, absl::Time deadline) {
            return peers_.Probe(address, bytes, deadline);
          },
          [this] { return Peers(); },
          [this](const std::string& address, const Member& member) {
            directory_.Learn(address, member);
          },
          [this](const std::string& data_address, absl::Time deadline) {
            return endpoint_->RoundTrip(data_address, deadline);
          }) {}

std::vector<Member> Node::Peers() {
  std::vector<Member> in_plans;
  for (const std::shared_ptr<Communicator>& comm : communicators_.List()) {
    for (const PlanDaemon& daemon : comm->plan().daemons) in_plans.push_back(daemon.member);
  }
  const absl::Time now = absl::Now();
  directory_.Update(in_plans, now);
  return directory_.Active(now);
}

std::vector<LinkView> Node::Links() {
  const std::vector<Member> peers = Peers();
  absl::flat_hash_map<std::string, transport::LinkStats> traffic;
  for (transport::LinkStats& link : endpoint_->Stats()) traffic[link.peer] = std::move(link);
  absl::flat_hash_map<std::string, LinkHealth> health;
  for (LinkHealth& link : monitor_.Snapshot()) health[link.peer.peer_address] = std::move(link);
  std::vector<LinkView> links;
  for (const Member& peer : peers) {
    LinkView view;
    view.peer = peer;
    if (auto it = traffic.find(peer.data_address);
        it != traffic.end() && !peer.data_address.empty()) {
      view.traffic = LinkTraffic::From(it->second);
    }
    view.traffic.peer = peer.data_address;
    if (auto it = health.find(peer.peer_address); it != health.end()) view.health = it->second;
    links.push_back(std::move(view));
  }
  return links;
}

uint64_t Node::RefusedMessages() const {
  uint64_t refused = 0;
  for (const transport::LinkStats& link : endpoint_->Stats()) {
    refused += link.Counter("refused_messages");
  }
  return refused;
}

uint64_t Node::collectives_completed() const {
  uint64_t total = collectives_completed_.load();
  for (const collective::NodeArena::Counters& count : communicators_.ArenaTotals()) {
    total += count.operations;
  }
  return total;
}

void Node::RememberMeasured(const std::string& key, std::vector<int64_t> agreed) {
  absl::MutexLock lock(&tuner_mu_);
  tuner_tables_[key] = TunerTable{++tuner_updates_, std::move(agreed)};
  if (tuner_tables_.size() <= kRememberedTunerTables) return;
  auto oldest = tuner_tables_.begin();
  for (auto it = tuner_tables_.begin(); it != tuner_tables_.end(); ++it) {
    if (it->second.updated < oldest->second.updated) oldest = it;
  }
  tuner_tables_.erase(oldest);
}

void Node::FinishPlan(Plan& plan) {
  plan.chunk_bytes = config_.chunk_bytes;
  plan.model_only = !config_.tuner_learn;
  if (absl::Status ordered = Rendezvous::OrderByLocality(plan); !ordered.ok()) {
    spdlog::warn("communicator {:x}: keeping rank order: {}", plan.comm_tag, ordered.ToString());
  }
  if (!plan.model_only) {
    absl::MutexLock lock(&tuner_mu_);
    if (auto it = tuner_tables_.find(plan.TunerKey()); it != tuner_tables_.end()) {
      plan.measured_seed = it->second.agreed;
    }
  }
  // The link model: this daemon's links to the others, measured now where not cached. At most
  // kMeasuredAtSetup links and two seconds, so that forming a large communicator stays quick.
  constexpr size_t kMeasuredAtSetup = 8;
  std::vector<Member> others;
  for (const PlanDaemon& daemon : plan.daemons) {
    if (daemon.member.peer_address != self_.peer_address && others.size() < kMeasuredAtSetup) {
      others.push_back(daemon.member);
    }
  }
  if (others.empty()) return;
  // Known before the probes below, whose data-plane round trips fetch the peers' data keys.
  directory_.AddPlan(others);
  // A message's latency: half the round trip over the data plane, where every measured link has
  // one; else over the peer API, whose gRPC calls cost more than the data plane's frames (on the
  // 4-host test cluster 228-376 us against 32-123 us) and so overstate it.
  std::vector<absl::Duration> rtts;
  std::vector<absl::Duration> data_rtts;
  double slowest = 0;
  for (const LinkHealth& link : monitor_.Measured(others, absl::Now() + absl::Seconds(2))) {
    if (link.rtt > absl::ZeroDuration()) rtts.push_back(link.rtt);
    if (link.data_rtt > absl::ZeroDuration()) data_rtts.push_back(link.data_rtt);
    // Capacity, not what collectives left over while a probe ran.
    if (link.best_bandwidth > 0) {
      slowest = slowest == 0 ? link.best_bandwidth : std::min(slowest, link.best_bandwidth);
    }
  }
  if (rtts.empty() || slowest == 0) {
    spdlog::info("communicator {:x}: links not measured; the tuner uses its defaults",
                 plan.comm_tag);
    return;
  }
  const bool data_plane = data_rtts.size() == rtts.size();
  std::vector<absl::Duration>& used = data_plane ? data_rtts : rtts;
  std::sort(used.begin(), used.end());
  const absl::Duration alpha = used[used.size() / 2] / 2;
  plan.link_alpha_seconds = absl::ToDoubleSeconds(alpha);
  plan.link_bytes_per_second = slowest;
  spdlog::info(
      "communicator {:x}: {} daemons, link model alpha {} (from {} round trips) beta "
      "{:.1f} MB/s",
      plan.comm_tag, plan.daemons.size(), absl::FormatDuration(alpha),
      data_plane ? "data-plane" : "peer API", slowest / 1e6);
}

absl::StatusOr<std::vector<collective::AlgorithmCost>> Node::Explain(uint64_t session_id,
                                                                     uint64_t comm_tag,
                                                                     collective::Collective kind,
                                                                     const std::string& data_type,
                                                                     uint64_t count) {
  if (!sessions_.Exists(session_id)) {
    return absl::NotFoundError(absl::StrCat("unknown session ", session_id));
  }
  std::shared_ptr<Communicator> comm = communicators_.Find(comm_tag);
  if (comm == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown communicator ", absl::Hex(comm_tag)));
  }
  std::optional<collective::DataType> type = collective::ParseDataType(data_type);
  if (!type) return absl::InvalidArgumentError(absl::StrCat("unknown data type '", data_type, "'"));
  const uint64_t element = collective::DataTypeSize(*type);
  if (count > UINT64_MAX / element) {
    return absl::InvalidArgumentError(absl::StrCat("count ", count, " overflows"));
  }
  return comm->Predict(kind, count * element);
}

int Node::SubmissionChannels() {
  absl::MutexLock lock(&channels_mu_);
  return static_cast<int>(channels_.size());
}

int Node::LocalRanks() const {
  int ranks = 0;
  for (const std::shared_ptr<Communicator>& comm : communicators_.List()) {
    ranks += static_cast<int>(comm->local_ranks().size());
  }
  return ranks;
}

absl::StatusOr<transport::HandshakeKey> Node::FetchDataKey(const std::string& data_address,
                                                           absl::Time deadline) {
  std::optional<Member> peer = directory_.MemberAt(data_address);
  if (!peer.has_value() || peer->peer_address.empty() || peer->node_name.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no plan or probe names the daemon at data address ", data_address));
  }
  absl::StatusOr<std::string> key =
      peers_.DataKey(peer->peer_address, peer->node_name, self_.data_address, deadline);
  if (!key.ok()) return key.status();
  transport::HandshakeKey result;
  if (key->size() != result.size()) {
    return absl::DataLossError(absl::StrCat("node ", peer->node_name, " sent a data key of ",
                                            key->size(), " bytes instead of ", result.size()));
  }
  std::memcpy(result.data(), key->data(), result.size());
  return result;
}

std::string Node::HolderOf(const std::string& data_address) const {
  std::optional<Member> peer = directory_.MemberAt(data_address);
  if (peer.has_value()) return peer->node_name;
  return data_address == self_.data_address ? self_.node_name : "";
}

absl::Status Node::ExplainFailure(const Plan& plan, const absl::Status& failure,
                                  absl::Time started) {
  if (!absl::IsDeadlineExceeded(failure) && !absl::IsUnavailable(failure)) return failure;
  std::vector<std::string> silent;
  if (std::optional<absl::Duration> stalled = stalls_.LongestSince(started)) {
    silent.push_back(
        absl::StrCat("node ", self_.node_name, " (this daemon: it did not run for ",
                     absl::FormatDuration(absl::Trunc(*stalled, absl::Milliseconds(100))),
                     " during the operation: stopped, or starved of CPU)"));
  }
  std::vector<const Member*> others;
  for (const PlanDaemon& daemon : plan.daemons) {
    if (daemon.member.data_address == self_.data_address) continue;
    if (others.size() < kMaxSuspectProbes) others.push_back(&daemon.member);
  }
  // A ring waiting for a stopped daemon times out on most ranks waiting for a healthy neighbour,
  // which waits in turn; what tells them apart is whether the daemon answers now.
  std::vector<absl::Status> answers(others.size());
  {
    const absl::Time deadline = absl::Now() + kSuspectProbeTimeout;
    std::vector<std::thread> probes;
    probes.reserve(others.size());
    for (size_t i = 0; i < others.size(); ++i) {
      probes.emplace_back(
          [&, i] { answers[i] = peers_.Probe(others[i]->peer_address, 64, deadline).status(); });
    }
    for (std::thread& probe : probes) probe.join();
  }
  for (size_t i = 0; i < others.size(); ++i) {
    if (answers[i].ok() || absl::IsCancelled(answers[i])) continue;  // cancelled: shutting down
    silent.push_back(absl::StrCat("node ", others[i]->node_name, " (no answer to a probe within ",
                                  absl::FormatDuration(kSuspectProbeTimeout), ")"));
  }
  if (silent.empty()) {
    return absl::Status(failure.code(),
                        absl::StrCat(failure.message(),
                                     " (every daemon of the communicator answered a probe "
                                     "after the failure: a rank may be late to submit)"));
  }
  spdlog::warn("communicator {:x}: not responding: {}", plan.comm_tag, absl::StrJoin(silent, ", "));
  // First, so that it survives the truncation of long abort messages.
  return absl::Status(failure.code(), absl::StrCat("not responding: ", absl::StrJoin(silent, ", "),
                                                   "; ", failure.message()));
}

absl::StatusOr<std::string> Node::CreateCommId(uint64_t session_id) {
  BATON_ASSIGN_OR_RETURN(const uid_t uid, sessions_.UidOf(session_id));
  BATON_ASSIGN_OR_RETURN(std::string secret, rendezvous_.CreateSecret(uid));
  return absl::StrCat(self_.peer_address, "/", secret);
}

absl::StatusOr<JoinResult> Node::Join(uint64_t session_id, const std::string& comm_id,
                                      int world_size, int rank, absl::Time deadline) {
  if (!sessions_.Exists(session_id)) {
    return absl::NotFoundError(absl::StrCat("unknown session ", session_id));
  }
  BATON_ASSIGN_OR_RETURN(CommId id, ParseCommId(comm_id));
  BATON_RETURN_IF_ERROR(CheckWorld(world_size, rank, config_.max_world_size));
  // Held from now on (a join that waits counts: it holds a thread), given back by Destroy, by
  // the session's end, or below if the join fails.
  BATON_RETURN_IF_ERROR(sessions_.HoldRank(session_id));
  absl::StatusOr<JoinResult> joined = JoinHeld(session_id, id, world_size, rank, deadline);
  if (!joined.ok()) sessions_.ReleaseRanks(session_id, 1);
  return joined;
}

absl::StatusOr<JoinResult> Node::JoinHeld(uint64_t session_id, const CommId& id, int world_size,
                                          int rank, absl::Time deadline) {
  absl::StatusOr<Plan> plan =
      id.root_address == self_.peer_address
          ? rendezvous_.Join(id.secret, world_size, rank, self_, deadline)
          : peers_.JoinRank(id.root_address, id.secret, world_size, rank, self_, deadline);
  if (!plan.ok()) return plan.status();
  BATON_RETURN_IF_ERROR(
      Annotate(CheckPlan(*plan, world_size), absl::StrCat("root daemon ", id.root_address)));
  plan->secret = id.secret;
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> comm, communicators_.GetOrCreate(*plan));
  // A tag is only the first half of a secret, and the root chose it: a plan that names the tag of
  // a communicator this daemon already has must come with that communicator's secret, or the
  // rank would attach to a communicator it never had the id of.
  if (!ConstantTimeEquals(comm->plan().secret, plan->secret)) {
    return absl::PermissionDeniedError(
        absl::StrCat("root daemon ", id.root_address, " answered with the tag of communicator ",
                     absl::Hex(plan->comm_tag), ", which this daemon holds under another id"));
  }
  NoteFormed();
  if (absl::Status connected = ConnectPeers(*comm, deadline); !connected.ok()) {
    // Its data plane cannot carry the communicator's messages: it fails on every daemon now,
    // rather than each operation at its deadline.
    comm->Abort(connected, /*notify_peers=*/true);
    return connected;
  }
  ApplyEarlyAborts(*comm);
  BATON_RETURN_IF_ERROR(comm->AttachRank(rank, session_id));
  spdlog::info("rank {} of {} joined communicator {:x} ({} daemons)", rank, world_size,
               plan->comm_tag, plan->daemons.size());
  return JoinResult{plan->comm_tag, static_cast<int>(plan->daemons.size()),
                    static_cast<int>(comm->local_ranks().size())};
}

absl::Status Node::Destroy(uint64_t session_id, uint64_t comm_tag, int rank) {
  std::shared_ptr<Communicator> comm = communicators_.Find(comm_tag);
  if (comm == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown communicator ", absl::Hex(comm_tag)));
  }
  const std::vector<int> left = comm->DetachSession(session_id);
  if (left.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("this session holds no rank of communicator ", absl::Hex(comm_tag)));
  }
  sessions_.ReleaseRanks(session_id, static_cast<int>(left.size()));
  // The other ranks' collectives from there on would wait for it until their timeout.
  for (int gone : left) {
    comm->RankLeft(
        gone, absl::FailedPreconditionError(absl::StrCat(
                  "rank ", gone, " destroyed its handle of the communicator (on node ",
                  self_.node_name, "): it takes no part in this collective or any later one")));
  }
  CloseChannels([&](const ChannelServer& c) {
    return c.session_id() == session_id && c.comm_tag() == comm_tag;
  });
  if (comm->Empty()) {
    communicators_.Remove(comm_tag);
    endpoint_->Forget(comm_tag);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Node::RunCollective(const CollectiveCall& call) {
  std::shared_ptr<Communicator> comm = communicators_.Find(call.comm_tag);
  if (comm == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown communicator ", absl::Hex(call.comm_tag)));
  }
  // Only a rank this session holds may learn anything about the communicator, even whether its
  // arguments are valid.
  BATON_RETURN_IF_ERROR(comm->CheckAttached(call.rank, call.session_id));
  absl::StatusOr<OpRequest> request = RequestOf(call, comm->plan().world_size);
  if (!request.ok()) {
    if (comm->plan().world_size > 1 && !call.spec.PointToPoint()) {
      // The other ranks would wait for this rank's part until their timeout: this collective,
      // and every later one, fails now on every rank, naming the rank and its error (the ones
      // before it go on). Only this call gets the error itself.
      comm->FailFromNextOf(
          call.rank,
          absl::AbortedError(absl::StrCat("communicator aborted by rank ", call.rank, ": its ",
                                          collective::CollectiveName(call.spec.collective),
                                          " was refused on node ", self_.node_name, ": ",
                                          request.status().ToString())),
          /*notify_peers=*/true);
    }
    return request.status();
  }
  return comm->Submit(call.rank, call.session_id, *std::move(request), call.deadline);
}

absl::StatusOr<OpRequest> Node::RequestOf(const CollectiveCall& call, int world) {
  OpRequest request;
  request.spec = call.spec;
  collective::OpSpec& spec = request.spec;
  if (spec.collective == collective::Collective::kBarrier) spec.count = 0;
  if (!spec.Rooted()) spec.root = 0;
  if (!spec.PointToPoint()) spec.peer = 0;
  BATON_RETURN_IF_ERROR(spec.Validate(world, call.rank));

  const uint64_t element = collective::DataTypeSize(spec.type);
  int device_ordinal = -1;  // of the device memory seen so far
  bool host_memory = false;
  auto use = [&](const BufferRegion& region, transport::MemoryKind& kind) -> absl::Status {
    kind = region.memory;
    request.pins.push_back(region.pin);
    if (region.memory == transport::MemoryKind::kHost) {
      host_memory = true;
    } else if (device_ordinal >= 0 && device_ordinal != region.device_ordinal) {
      return absl::InvalidArgumentError("send and recv are device memory of different GPUs");
    } else {
      device_ordinal = region.device_ordinal;
    }
    if (host_memory && device_ordinal >= 0) {
      return absl::InvalidArgumentError(
          "one of send and recv is host memory and the other device memory; pass both in the "
          "same kind of memory");
    }
    return absl::OkStatus();
  };
  // A node part (collective/schedule.h) is one buffer in host memory, input and output in place.
  const uint64_t send_count = call.spec.node_part ? 0 : spec.SendElements(world, call.rank);
  const uint64_t recv_count = call.spec.node_part ? collective::NodePartElements(spec, world)
                                                  : spec.RecvElements(world, call.rank);
  if (send_count > 0) {
    BATON_ASSIGN_OR_RETURN(BufferRegion send,
                           sessions_.Resolve(call.session_id, call.send_buffer, call.send_offset,
                                             send_count * element));
    BATON_RETURN_IF_ERROR(CheckElementOffset("send", call.send_offset, spec.type));
    request.send = send.data;
    request.send_region = send.registered;
    BATON_RETURN_IF_ERROR(use(send, spec.send_memory));
  }
  if (recv_count > 0) {
    BATON_ASSIGN_OR_RETURN(BufferRegion recv,
                           sessions_.Resolve(call.session_id, call.recv_buffer, call.recv_offset,
                                             recv_count * element));
    BATON_RETURN_IF_ERROR(CheckElementOffset("recv", call.recv_offset, spec.type));
    request.recv = recv.data;
    request.recv_region = recv.registered;
    BATON_RETURN_IF_ERROR(use(recv, spec.recv_memory));
  }
  if (call.spec.node_part) {
    if (device_ordinal >= 0) {
      return absl::InvalidArgumentError("a node's part of an operation must be in host memory");
    }
    request.send = request.recv;
    request.send_region = request.recv_region;
    spec.send_memory = spec.recv_memory;
  }
  if (device_ordinal >= 0) {
    BATON_ASSIGN_OR_RETURN(request.device, OperationDeviceFor(device_ordinal));
  }
  if (call.stream) {
    BATON_ASSIGN_OR_RETURN(std::shared_ptr<EventSet> events,
                           sessions_.Events(call.session_id, call.stream->event_set));
    if (call.stream->slot >= events->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "event slot ", call.stream->slot, " is outside event set ", call.stream->event_set));
    }
    // The rank's stream reaches the operation when the event is done: only then are its
    // inputs written. A missed deadline fails this call only (nothing was submitted).
    BATON_RETURN_IF_ERROR(WaitForEvent(*(*events)[call.stream->slot], call.deadline, call.rank));
  }
  return request;
}

absl::Status Node::WaitForEvent(device::Event& event, absl::Time deadline, int rank) {
  // Polled, never waited for on the device: a stream wait on an event that never completes
  // would hold the daemon's stream, and a timeout must name the rank.
  absl::Duration pause = absl::Microseconds(2);
  const absl::Time spin_until = absl::Now() + absl::Microseconds(50);
  while (true) {
    BATON_ASSIGN_OR_RETURN(const bool done, event.Query());
    if (done) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", rank,
                       "'s stream did not reach the operation before the deadline (the work "
                       "enqueued before it on the stream did not finish)"));
    }
    if (now < spin_until) {
      std::this_thread::yield();
      continue;
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(1));
  }
}

absl::StatusOr<const device::OperationDevice*> Node::OperationDeviceFor(int ordinal) {
  if (operation_devices_ == nullptr) {
    return absl::FailedPreconditionError("this node's batond has no GPU device");
  }
  return operation_devices_->For(ordinal);
}

absl::Status Node::OpenChannel(uint64_t session_id, uint64_t comm_tag, int rank,
                               uint64_t buffer_id) {
  std::shared_ptr<Communicator> comm = communicators_.Find(comm_tag);
  if (comm == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown communicator ", absl::Hex(comm_tag)));
  }
  BATON_RETURN_IF_ERROR(comm->CheckAttached(rank, session_id));
  BATON_ASSIGN_OR_RETURN(BufferRegion page,
                         sessions_.Resolve(session_id, buffer_id, 0, channel::kChannelBytes));
  if (page.host == nullptr) {
    return absl::InvalidArgumentError("a submission channel must be host shared memory");
  }
  BATON_ASSIGN_OR_RETURN(
      std::unique_ptr<ChannelServer> server,
      ChannelServer::Open(
          std::move(page.host), session_id, comm_tag, rank,
          [this](const CollectiveCall& call) { return RunCollective(call); }, config_.submit_spin));
  CloseChannels([&](const ChannelServer& c) {
    return c.session_id() == session_id && c.comm_tag() == comm_tag && c.rank() == rank;
  });
  absl::MutexLock lock(&channels_mu_);
  channels_.push_back(std::move(server));
  return absl::OkStatus();
}

void Node::CloseChannels(const std::function<bool(const ChannelServer&)>& match) {
  std::vector<std::unique_ptr<ChannelServer>> closing;
  {
    absl::MutexLock lock(&channels_mu_);
    auto keep = std::stable_partition(channels_.begin(), channels_.end(),
                                      [&](const auto& c) { return !match(*c); });
    std::move(keep, channels_.end(), std::back_inserter(closing));
    channels_.erase(keep, channels_.end());
  }
}

void Node::EndSession(uint64_t session_id) {
  // Aborting the session's communicators first makes any operation a channel is running return.
  communicators_.DropSession(session_id);
  CloseChannels([&](const ChannelServer& c) { return c.session_id() == session_id; });
  if (sessions_.Close(session_id).ok()) spdlog::debug("session {} ended", session_id);
}

absl::StatusOr<Plan> Node::JoinRank(const std::string& secret, int world_size, int rank,
                                    const Member& member, absl::Time deadline) {
  BATON_RETURN_IF_ERROR(CheckWorld(world_size, rank, config_.max_world_size));
  return rendezvous_.Join(secret, world_size, rank, member, deadline);
}

absl::StatusOr<Communicator::Arena> Node::OpenArena(uint64_t session_id, uint64_t comm_tag,
                                                    int rank) {
  std::shared_ptr<Communicator> comm = communicators_.Find(comm_tag);
  if (comm == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown communicator ", absl::Hex(comm_tag)));
  }
  return comm->OpenArena(rank, session_id);
}

absl::Status Node::AbortCommunicator(uint64_t session_id, uint64_t comm_tag, int rank,
                                     const std::string& reason, absl::StatusCode code,
                                     bool from_next_operation) {
  std::shared_ptr<Communicator> comm = communicators_.Find(comm_tag);
  if (comm == nullptr) {
    return absl::NotFoundError(absl::StrCat("no communicator ", absl::Hex(comm_tag)));
  }
  BATON_RETURN_IF_ERROR(comm->CheckAttached(rank, session_id));
  const absl::Status status(code, absl::StrCat("communicator aborted by rank ", rank, ": ",
                                               reason.empty() ? "no reason given" : reason));
  if (from_next_operation) {
    comm->FailFromNextOf(rank, status, /*notify_peers=*/true);
  } else {
    comm->Abort(status, /*notify_peers=*/true);
  }
  return absl::OkStatus();
}

absl::Status Node::AbortFromPeer(uint64_t comm_tag, const AbortNotice& notice,
                                 const std::string& from_node, const std::string& proof) {
  const absl::Status& reason = notice.reason;
  const std::optional<uint64_t>& from_operation = notice.from_operation;
  if (reason.message().size() > kMaxAbortMessage || from_node.size() > 256) {
    return absl::InvalidArgumentError("an abort's message or node name is too long");
  }
  if (notice.departed.has_value() &&
      notice.departed->sent.size() > static_cast<size_t>(config_.max_world_size)) {
    return absl::InvalidArgumentError("an abort names more ranks than a communicator may have");
  }
  std::shared_ptr<Communicator> comm;
  {
    // Looked up and kept under one lock, which ApplyEarlyAborts takes after the communicator
    // forms: a notice is either applied directly or found there, never lost in between.
    absl::MutexLock lock(&early_mu_);
    comm = communicators_.Find(comm_tag);
    // A rank that left a communicator this daemon has forgotten (every rank's Destroy sends one):
    // nothing here waits for it.
    if (comm == nullptr && from_operation.has_value()) return absl::OkStatus();
    if (comm == nullptr) {
      // The plan may still be on its way to this daemon's joining ranks (the sender's ranks got
      // theirs first): keep the notice, bounded, and check it when the communicator forms.
      const absl::Time now = absl::Now();
      std::erase_if(early_aborts_,
                    [&](const EarlyAbort& e) { return now - e.received > kEarlyTtl; });
      if (early_aborts_.size() < kMaxEarlyAborts) {
        early_aborts_.push_back({comm_tag, reason, from_node, proof, now});
      }
      return absl::OkStatus();
    }
  }
  BATON_RETURN_IF_ERROR(CheckAbortProof(comm->plan(), notice, from_node, proof));
  if (notice.departed.has_value()) comm->RemoteRankLeft(*notice.departed, reason);
  if (from_operation.has_value()) {
    comm->FailFrom(*from_operation, reason, /*notify_peers=*/false);
  } else {
    comm->Abort(reason, /*notify_peers=*/false);
  }
  return absl::OkStatus();
}

absl::Status Node::CheckAbortProof(const Plan& plan, const AbortNotice& notice,
                                   const std::string& from_node, const std::string& proof) const {
  bool member = false;
  for (const PlanDaemon& daemon : plan.daemons) {
    member = member || (daemon.member.node_name == from_node &&
                        daemon.member.data_address != self_.data_address);
  }
  const std::string expected = AbortProof(plan.secret, plan.comm_tag, notice, from_node);
  if (member && !plan.secret.empty() && ConstantTimeEquals(proof, expected)) {
    return absl::OkStatus();
  }
  // Whoever reaches the peer API can send these as fast as it likes.
  static LogLimiter refused_aborts(10, absl::Minutes(1));
  refused_aborts.Log(spdlog::level::warn,
                     "refused an abort of communicator {:x} claiming to come from node '{}': {}",
                     plan.comm_tag, from_node.substr(0, 64),
                     member ? "no proof of the communicator's secret" : "not a daemon of its plan");
  return absl::PermissionDeniedError(absl::StrCat(
      "abort of communicator ", absl::Hex(plan.comm_tag), " refused: ",
      member ? "no proof of the communicator's secret" : "the sender is not a daemon of its plan"));
}

void Node::ApplyEarlyAborts(Communicator& comm) {
  std::vector<EarlyAbort> mine;
  {
    absl::MutexLock lock(&early_mu_);
    auto moved = std::stable_partition(
        early_aborts_.begin(), early_aborts_.end(),
        [&](const EarlyAbort& e) { return e.comm_tag != comm.plan().comm_tag; });
    std::move(moved, early_aborts_.end(), std::back_inserter(mine));
    early_aborts_.erase(moved, early_aborts_.end());
  }
  for (const EarlyAbort& e : mine) {
    if (CheckAbortProof(comm.plan(), AbortNotice{e.reason}, e.from_node, e.proof).ok()) {
      comm.Abort(e.reason, /*notify_peers=*/false);
    }
  }
}

void Node::CloseAllChannels() {
  CloseChannels([](const ChannelServer&) { return true; });
}

void Node::AbortAll(const absl::Status& reason) {
  rendezvous_.Stop(reason);
  peers_.Stop();
  communicators_.AbortAll(reason, /*notify_peers=*/true);
}

void Node::NoteFormed() {
  absl::MutexLock lock(&connect_mu_);
  ++formed_;
}

absl::Status Node::ConnectPeers(const Communicator& comm, absl::Time deadline) {
  const Plan& plan = comm.plan();
  std::shared_ptr<PairExchange> exchange;
  bool mine = false;
  {
    absl::MutexLock lock(&connect_mu_);
    std::shared_ptr<PairExchange>& entry = exchanges_[plan.comm_tag];
    if (entry == nullptr) {
      // Bounded by the communicators this daemon has: those it no longer has are forgotten.
      absl::erase_if(exchanges_, [this, &plan](const auto& other) {
        return other.first != plan.comm_tag && communicators_.Find(other.first) == nullptr;
      });
      exchanges_[plan.comm_tag] = std::make_shared<PairExchange>();
      mine = true;
    }
    exchange = exchanges_[plan.comm_tag];
    if (!mine) {
      auto done = [&exchange]() { return exchange->done; };
      if (!connect_mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
        return absl::DeadlineExceededError(
            absl::StrCat("communicator ", absl::Hex(plan.comm_tag),
                         ": another rank's join is still exchanging connection data"));
      }
      return exchange->status;
    }
  }
  std::vector<const Member*> peers;
  for (const PlanDaemon& daemon : plan.daemons) {
    if (daemon.member.data_address != self_.data_address) peers.push_back(&daemon.member);
  }
  // In parallel, a few at a time: each call waits for its peer to form the communicator.
  constexpr size_t kConcurrentExchanges = 16;
  std::vector<absl::Status> results(peers.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < peers.size(); i = next++) {
      results[i] = ConnectPeer(plan, *peers[i], deadline);
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(kConcurrentExchanges, peers.size()); ++t) {
    threads.emplace_back(work);
  }
  work();
  for (std::thread& thread : threads) thread.join();
  absl::Status status;
  for (const absl::Status& result : results) {
    if (!result.ok()) {
      status = result;
      break;
    }
  }
  absl::MutexLock lock(&connect_mu_);
  exchange->done = true;
  exchange->status = status;
  return status;
}

absl::Status Node::ConnectPeer(const Plan& plan, const Member& peer, absl::Time deadline) {
  const std::string where = absl::StrCat("communicator ", absl::Hex(plan.comm_tag),
                                         ": connecting the data plane with "
                                         "node ",
                                         peer.node_name);
  absl::StatusOr<std::string> ours = endpoint_->ConnectionData(peer.data_address);
  if (!ours.ok()) return Annotate(ours.status(), where);
  // A link with nothing to exchange on our side has nothing on the peer's either: both ends of
  // a link are one transport (if the peer's end wanted data, its own call brings it here, and
  // our Connect refuses it).
  if (ours->empty()) return absl::OkStatus();
  const std::string proof =
      ConnectionDataProof(plan.secret, plan.comm_tag, self_.data_address, peer.data_address, *ours);
  absl::StatusOr<PeerClient::PairData> theirs =
      peers_.ConnectPair(peer.peer_address, peer.node_name, plan.comm_tag, self_.node_name,
                         self_.data_address, *ours, proof, deadline);
  if (!theirs.ok()) return Annotate(theirs.status(), where);
  if (theirs->data.size() > kMaxConnectionDataBytes ||
      !ConstantTimeEquals(theirs->proof,
                          ConnectionDataProof(plan.secret, plan.comm_tag, peer.data_address,
                                              self_.data_address, theirs->data))) {
    return absl::PermissionDeniedError(
        absl::StrCat(where, ": its answer carries no proof of the communicator's secret"));
  }
  return Annotate(endpoint_->Connect(peer.data_address, theirs->data), where);
}

absl::StatusOr<Node::PairData> Node::ConnectPairFromPeer(
    uint64_t comm_tag, const std::string& from_node, const std::string& from_data_address,
    const std::string& data, const std::string& proof, absl::Time deadline) {
  if (data.size() > kMaxConnectionDataBytes || from_node.size() > 256 ||
      from_data_address.size() > 1024) {
    return absl::InvalidArgumentError(
        "connection data, node name or data address longer than a daemon sends");
  }
  deadline = std::min(deadline, absl::Now() + kMaxConnectPairWait);
  // The plan may still be on its way to this daemon's ranks (the caller's got theirs first).
  std::shared_ptr<Communicator> comm;
  while (true) {
    uint64_t formed = 0;
    {
      absl::MutexLock lock(&connect_mu_);
      formed = formed_;
    }
    comm = communicators_.Find(comm_tag);
    if (comm != nullptr) break;
    absl::MutexLock lock(&connect_mu_);
    auto changed = [this, formed]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(connect_mu_) { return formed_ != formed; };
    if (!connect_mu_.AwaitWithDeadline(absl::Condition(&changed), deadline)) {
      return absl::NotFoundError(absl::StrCat("communicator ", absl::Hex(comm_tag),
                                              " has not formed on node ", self_.node_name));
    }
  }
  const Plan& plan = comm->plan();
  const int index = plan.IndexOf(from_data_address);
  const bool member = index >= 0 && from_data_address != self_.data_address &&
                      plan.daemons[static_cast<size_t>(index)].member.node_name == from_node;
  if (!member || plan.secret.empty() ||
      !ConstantTimeEquals(proof, ConnectionDataProof(plan.secret, comm_tag, from_data_address,
                                                     self_.data_address, data))) {
    static LogLimiter refused(10, absl::Minutes(1));
    refused.Log(spdlog::level::warn,
                "refused connection data for communicator {:x} claiming to come from node '{}': {}",
                comm_tag, from_node.substr(0, 64),
                member ? "no proof of the communicator's secret" : "not a daemon of its plan");
    return absl::PermissionDeniedError(
        absl::StrCat("connection data for communicator ", absl::Hex(comm_tag), " refused: ",
                     member ? "no proof of the communicator's secret"
                            : "the sender is not a daemon of its plan"));
  }
  BATON_ASSIGN_OR_RETURN(std::string ours, endpoint_->ConnectionData(from_data_address));
  BATON_RETURN_IF_ERROR(Annotate(endpoint_->Connect(from_data_address, data),
                                 absl::StrCat("connection data from node ", from_node)));
  std::string our_proof =
      ConnectionDataProof(plan.secret, comm_tag, self_.data_address, from_data_address, ours);
  return PairData{std::move(ours), std::move(our_proof)};
}

}  // namespace baton::daemon
