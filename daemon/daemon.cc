#include "daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/session_protocol.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/version.h"
#include "daemon/client_service.h"
#include "daemon/data_keys.h"
#include "daemon/http_server.h"
#include "daemon/metrics.h"
#include "daemon/node.h"
#include "daemon/peer_service.h"
#include "daemon/session_server.h"
#include "daemon/systemd_notify.h"
#include "device/device.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "topology/discovery.h"
#include "transport/routing_endpoint.h"
#include "transport/tcp/tcp_transport.h"

namespace baton::daemon {
namespace {

// What the peer server's connections may hold together (gRPC's resource quota): enough for the
// probes' 1 MiB transfers to every peer at once, not for thousands of handshakes.
constexpr size_t kPeerServerMemory = size_t{128} << 20;

// An exclusive flock on "<socket>.lock" that holds our pid, released when the fd closes.
class SocketLock {
 public:
  static absl::StatusOr<std::unique_ptr<SocketLock>> Acquire(const std::string& socket) {
    const std::string path = socket + ".lock";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return BATON_ERRNO_STATUS(absl::StrCat("open(", path, ")"));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      char buffer[32] = {};
      const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
      close(fd);
      const std::string owner = n > 0 ? std::string(absl::StripAsciiWhitespace(buffer)) : "?";
      return absl::FailedPreconditionError(
          absl::StrCat("another batond (pid ", owner, ") already owns ", socket,
                       "; refusing to start. Stop it first, or pick another --socket"));
    }
    const std::string pid = absl::StrCat(getpid(), "\n");
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      absl::Status status = BATON_ERRNO_STATUS(absl::StrCat("writing ", path));
      close(fd);
      return status;
    }
    return std::make_unique<SocketLock>(fd);
  }
  explicit SocketLock(int fd) : fd_(fd) {}
  ~SocketLock() { close(fd_); }
  SocketLock(const SocketLock&) = delete;
  SocketLock& operator=(const SocketLock&) = delete;

 private:
  int fd_;
};

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << contents;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", temp));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) return BATON_ERRNO_STATUS("rename ready file");
  return absl::OkStatus();
}

class DaemonImpl final : public Daemon {
 public:
  DaemonImpl(Config config, std::unique_ptr<SocketLock> lock)
      : config_(std::move(config)), lock_(std::move(lock)) {}
  ~DaemonImpl() override { Shutdown(); }

  absl::Status Init() {
    BATON_ASSIGN_OR_RETURN(
        peer_credentials_,
        PeerTlsCredentials::Load({config_.tls_cert, config_.tls_key, config_.tls_ca},
                                 config_.node_name));
    if (config_.data_encryption && !peer_credentials_.secure()) {  // FinalizeConfig checks too
      return absl::InvalidArgumentError("data_encryption needs tls_cert, tls_key and tls_ca");
    }
    if (peer_credentials_.secure()) {
      // Data connections prove keys handed out over the peer API's mutual TLS.
      data_keys_ = std::make_unique<DataKeys>();
      if (config_.data_encryption) {
        spdlog::info("data connections are sealed: AES-256-GCM under per-connection keys");
      } else if (DataIntegrity(config_)) {
        spdlog::info(
            "data connections are authenticated (data_integrity): payloads in the clear, each "
            "256 KiB with a GMAC tag under per-connection keys");
      } else {
        spdlog::warn(
            "data_integrity=off: payloads on data connections are neither authenticated nor "
            "encrypted, so a host on the path can change them unnoticed (unless the peer asks)");
      }
    } else {
      spdlog::warn(
          "no tls_cert, tls_key and tls_ca: the peer API and data connections are "
          "unauthenticated, so anyone who reaches {} or {} can act as a daemon of this cluster "
          "(development only; /readyz says insecure)",
          config_.peer_listen, config_.data_listen);
    }
    transport::TcpOptions tcp;
    tcp.handshake_keys = data_keys_.get();
    tcp.handshake_timeout = config_.data_handshake_timeout;
    tcp.max_pending_handshakes = static_cast<int>(config_.max_pending_data_handshakes);
    tcp.max_pending_handshakes_per_source =
        static_cast<int>(config_.max_pending_data_handshakes_per_source);
    tcp.listen_address = config_.data_listen;
    tcp.advertise_host = config_.advertise_host;
    // One progress engine for the daemon: every transport's waits go through it.
    progress_ = std::make_unique<transport::ProgressEngine>(
        transport::ProgressEngine::Options{.spin = config_.receive_spin});
    tcp.progress = progress_.get();
    tcp.streams_per_peer = static_cast<int>(config_.tcp_streams);
    tcp.checksum = config_.data_checksum;
    tcp.seal = config_.data_encryption;
    tcp.authenticate = DataIntegrity(config_) && peer_credentials_.secure();
    // The data-plane transports, in order of preference: a new transport is one more entry
    // here (shm, cuda and verbs before TCP, which reaches every daemon). Each listens, is
    // advertised in this daemon's Member, and carries the peers the selector gives it.
    transports_.push_back(transport::NewTcpTransport(tcp));
    std::vector<transport::Endpoint*> endpoints;
    std::vector<transport::TransportAddress> advertised;
    for (const std::unique_ptr<transport::Transport>& data_transport : transports_) {
      BATON_ASSIGN_OR_RETURN(std::unique_ptr<transport::Endpoint> endpoint,
                             data_transport->Listen());
      advertised.push_back({std::string(data_transport->name()), endpoint->address()});
      endpoints.push_back(endpoint.get());
      transport_endpoints_.push_back(std::move(endpoint));
    }
    endpoint_ = std::make_unique<transport::RoutingEndpoint>(std::move(endpoints));

    // grpc.health.v1 on both servers: "" reports SERVING while the daemon serves.
    grpc::EnableDefaultHealthCheckService(true);
    peer_service_ = std::make_unique<PeerService>(peer_credentials_.secure(), data_keys_.get());
    int peer_port = 0;
    grpc::ServerBuilder peer_builder;
    // Anyone who reaches the port can open connections: a TLS handshake not done within
    // data_handshake_timeout ends (gRPC's default waits 120 s), and the server's connections
    // together get a bounded amount of memory.
    peer_builder.AddChannelArgument(
        GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
        static_cast<int>(absl::ToInt64Milliseconds(config_.data_handshake_timeout)));
    grpc::ResourceQuota peer_quota("batond-peer");
    peer_quota.Resize(kPeerServerMemory);
    peer_builder.SetResourceQuota(peer_quota);
    peer_builder.AddListeningPort(config_.peer_listen, peer_credentials_.server(), &peer_port);
    peer_builder.RegisterService(peer_service_.get());
    peer_server_ = peer_builder.BuildAndStart();
    if (peer_server_ == nullptr || peer_port == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve the peer API on ", config_.peer_listen));
    }

    Member self{config_.node_name, absl::StrCat(config_.advertise_host, ":", peer_port),
                endpoint_->address(),
                absl::StrSplit(config_.locality, ',', absl::SkipWhitespace())};
    self.transports = std::move(advertised);
    BATON_ASSIGN_OR_RETURN(NodeTopology topology, LoadTopology());
    absl::StatusOr<std::unique_ptr<device::Device>> device = device::OpenDevice(config_.device);
    if (!device.ok()) return Annotate(device.status(), "device");
    if (*device != nullptr) {
      spdlog::info("GPU device: {}", (*device)->Describe());
    } else {
      spdlog::info("no GPU device (device={}): host memory only", config_.device);
    }
    metrics_ = Metrics::Create(self.node_name, kBatonVersion);
    Node::TransportSelector select = [this, self_info = self.ToPeerInfo()](const Member& peer) {
      std::vector<transport::Transport*> transports;
      for (const std::unique_ptr<transport::Transport>& t : transports_) {
        transports.push_back(t.get());
      }
      return endpoint_->Select(transports, self_info, peer.ToPeerInfo(), peer.data_address);
    };
    node_ =
        std::make_unique<Node>(config_, self, endpoint_.get(), metrics_.get(), std::move(topology),
                               peer_credentials_, std::move(select), std::move(*device));
    metrics_->SetNode(node_.get());
    metrics_->SetProgress(progress_.get());
    if (data_keys_ != nullptr) {
      data_keys_->Bind(
          [node = node_.get()](const std::string& data_address, absl::Time deadline) {
            return node->FetchDataKey(data_address, deadline);
          },
          [node = node_.get()](const std::string& data_address) {
            return node->HolderOf(data_address);
          });
    }
    peer_service_->SetNode(node_.get());
    node_->StartLinkMonitor();

    std::vector<HttpRoute> routes = {
        {"/metrics",
         [this] {
           return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_->Render()};
         }},
        {"/healthz",
         [] {
           return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
         }},
        {"/readyz", [this] { return Readiness(); }},
    };
    BATON_ASSIGN_OR_RETURN(http_, HttpServer::Start(config_.metrics_listen, std::move(routes)));

    const std::filesystem::path socket(config_.socket);
    std::error_code error;
    std::filesystem::create_directories(socket.parent_path(), error);
    std::filesystem::remove(socket, error);  // stale: we hold the lock, so no daemon serves it
    DaemonInfo info{kBatonVersion, http_->address(), absl::Now()};
    client_service_ = std::make_unique<ClientService>(node_.get(), info, &shutting_down_);
    grpc::ServerBuilder client_builder;
    // Client calls block (Join, Collective) for as long as the operation takes. With
    // gRPC's default of at most two polling threads, every concurrent call would spawn and then
    // retire a thread; keep enough pollers for a node's ranks instead.
    client_builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
    client_builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 4);
    client_builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 64);
    client_builder.AddListeningPort("unix://" + config_.socket, grpc::InsecureServerCredentials());
    client_builder.RegisterService(client_service_.get());
    client_server_ = client_builder.BuildAndStart();
    if (client_server_ == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve the client API on ", config_.socket));
    }
    chmod(config_.socket.c_str(), 0660);
    SessionServerOptions sessions;
    sessions.path = session::SessionSocketPath(config_.socket);
    sessions.node_name = self.node_name;
    sessions.handshake_timeout = config_.session_handshake_timeout;
    sessions.max_pending = static_cast<int>(config_.max_pending_sessions);
    sessions.max_pending_per_uid = static_cast<int>(config_.max_pending_sessions_per_uid);
    BATON_ASSIGN_OR_RETURN(std::vector<uint32_t> uids,
                           ParseIdList("allowed_uids", config_.allowed_uids));
    BATON_ASSIGN_OR_RETURN(std::vector<uint32_t> gids,
                           ParseIdList("allowed_gids", config_.allowed_gids));
    sessions.allowed_uids.assign(uids.begin(), uids.end());
    sessions.allowed_gids.assign(gids.begin(), gids.end());
    sessions.open_arena = [node = node_.get()](
                              uint64_t session_id, uint64_t comm_tag,
                              int rank) -> absl::StatusOr<SessionServerOptions::Arena> {
      BATON_ASSIGN_OR_RETURN(Communicator::Arena arena,
                             node->OpenArena(session_id, comm_tag, rank));
      return SessionServerOptions::Arena{arena.fd, arena.bytes, arena.rank};
    };
    BATON_ASSIGN_OR_RETURN(
        session_server_,
        SessionServer::Start(std::move(sessions), &node_->sessions(),
                             [node = node_.get()](uint64_t id) { node->EndSession(id); }));
    serving_ = true;

    spdlog::info("batond {} serving as node {}: client {} peer {} data {} metrics {}",
                 kBatonVersion, self.node_name, config_.socket, self.peer_address,
                 self.data_address, http_->address());
    if (!config_.ready_file.empty()) {
      BATON_RETURN_IF_ERROR(WriteFileAtomically(
          config_.ready_file,
          absl::StrCat("node_name=", self.node_name, "\nsocket=", config_.socket,
                       "\npeer_address=", self.peer_address, "\ndata_address=", self.data_address,
                       "\nmetrics_address=", http_->address(), "\npid=", getpid(), "\n")));
    }
    NotifySystemd(
        absl::StrCat("READY=1\nMAINPID=", getpid(), "\nSTATUS=serving as node ", self.node_name));
    if (std::optional<absl::Duration> interval = SystemdWatchdogInterval()) {
      watchdog_ = std::thread([this, period = *interval / 2] {
        SetThreadName("baton-watchdog");
        RunWatchdog(period);
      });
    }
    return absl::OkStatus();
  }

  void Shutdown() override {
    if (shutting_down_.HasBeenNotified()) return;
    shutting_down_.Notify();
    serving_ = false;
    NotifySystemd("STOPPING=1");
    if (watchdog_.joinable()) watchdog_.join();
    spdlog::info("shutting down");
    if (node_ != nullptr) {
      node_->StopLinkMonitor();
      node_->AbortAll(absl::UnavailableError(
          absl::StrCat("batond on node ", config_.node_name, " is shutting down")));
      node_->CloseAllChannels();
    }
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(3);
    session_server_.reset();  // ends every session
    if (client_server_ != nullptr) client_server_->Shutdown(deadline);
    if (peer_server_ != nullptr) peer_server_->Shutdown(deadline);
    http_.reset();
    client_server_.reset();
    peer_server_.reset();
    client_service_.reset();
    if (data_keys_ != nullptr) data_keys_->Bind(nullptr, nullptr);  // no key fetches via the node
    node_.reset();
    metrics_.reset();
    endpoint_.reset();
    transport_endpoints_.clear();
    transports_.clear();
    std::error_code error;
    std::filesystem::remove(config_.socket, error);
    if (!config_.ready_file.empty()) std::filesystem::remove(config_.ready_file, error);
    spdlog::info("stopped");
  }

 private:
  // The recorded topology if configured (an unreadable file stops the daemon), else this node's
  // discovered one (a failed discovery is logged and leaves an empty graph: collectives do not
  // need it yet).
  absl::StatusOr<NodeTopology> LoadTopology() const {
    if (!config_.topology_file.empty()) {
      absl::StatusOr<topology::Graph> graph = topology::LoadTopologyFile(config_.topology_file);
      if (!graph.ok()) return Annotate(graph.status(), "topology_file");
      return NodeTopology{std::move(*graph), "file:" + config_.topology_file, ""};
    }
    absl::StatusOr<topology::Discovery> discovered = topology::DiscoverLocalNode();
    if (!discovered.ok()) {
      spdlog::warn("topology discovery failed: {}", discovered.status().ToString());
      return NodeTopology{topology::Graph(), "discovered",
                          std::string{discovered.status().message()}};
    }
    return NodeTopology{std::move(discovered->graph), "discovered", discovered->gpu_note};
  }

  HttpResponse Readiness() const {
    if (!serving_) return HttpResponse{503, "text/plain; charset=utf-8", "not serving\n"};
    // Ready either way; an orchestrator's probe or an SRE's curl sees that nothing authenticates
    // this daemon's peers.
    return HttpResponse{200, "text/plain; charset=utf-8",
                        peer_credentials_.secure() ? "ready\n" : "ready insecure\n"};
  }

  // Pings systemd's watchdog while the daemon's core answers: listing communicators and sessions
  // takes the locks every request path takes, so a deadlocked daemon stops pinging and is
  // restarted.
  void RunWatchdog(absl::Duration period) {
    while (!shutting_down_.WaitForNotificationWithTimeout(period)) {
      (void)node_->communicators().List();
      (void)node_->sessions().Count();
      NotifySystemd("WATCHDOG=1");
    }
  }

  const Config config_;
  std::unique_ptr<SocketLock> lock_;
  absl::Notification shutting_down_;
  PeerTlsCredentials peer_credentials_;
  std::unique_ptr<DataKeys> data_keys_;  // with TLS; outlives the transports, which use it
  // Outlives the transports and their endpoints, which wait through it.
  std::unique_ptr<transport::ProgressEngine> progress_;
  std::vector<std::unique_ptr<transport::Transport>> transports_;
  std::vector<std::unique_ptr<transport::Endpoint>> transport_endpoints_;  // transports_[i]'s
  // Routes each peer to the endpoint of its transport; what the node uses.
  std::unique_ptr<transport::RoutingEndpoint> endpoint_;
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<grpc::Server> peer_server_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<HttpServer> http_;
  std::atomic<bool> serving_{false};
  std::thread watchdog_;
  std::unique_ptr<ClientService> client_service_;
  std::unique_ptr<grpc::Server> client_server_;
  std::unique_ptr<SessionServer> session_server_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const Config& config) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(config.socket).parent_path(), error);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<SocketLock> lock, SocketLock::Acquire(config.socket));
  auto daemon = std::make_unique<DaemonImpl>(config, std::move(lock));
  BATON_RETURN_IF_ERROR(daemon->Init());
  return daemon;
}

}  // namespace baton::daemon
