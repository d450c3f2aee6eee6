// libFuzzer target: every handler of batond's client API (its unix socket) and peer API (TCP with
// mutual TLS), called the way a local process or another daemon would, with whatever request
// they could send; plus the plan a root daemon answers a forwarded join with, and an operation
// written into a submission channel. One daemon runs in this process for the whole run (TLS on,
// every listener on 127.0.0.1 or in a temporary directory); every call must come back with a
// status, within its deadline, with no sanitizer report.
//
// An input is [method][flags][payload]. The payload is the method's request proto (for a join
// through a root: [n][n bytes of JoinRequest][the root's Plan]; for a channel submission: the
// descriptor and its vector tail). Most requests only get past the first check with values the
// fuzzer cannot guess (a session's token, a communicator's tag or secret, a buffer id), so flag
// bits put the harness's own in their place: a session it opened, communicators it joined,
// buffers it registered, a certified node name, a valid abort proof. Timeouts are clamped to a
// few milliseconds, so that a join nobody completes or an operation nobody matches costs little.
//
// Only this process is ever reached: every address in a request that the daemon may dial (a
// member's peer and data addresses and transports, a plan's daemons) is replaced by one of a
// fixed few - this daemon's own, the harness's root, a port nobody listens on, or malformed ones
// - so a fuzzed address never makes it connect elsewhere or ask a name server; a communicator
// id's root is this daemon (or, for kJoinThroughRoot, the harness's root). The daemon's state
// carries over from one input to the next (communicators, channels, pending joins: that is where
// its bugs live), so a crash may need the inputs before it: run the target over the corpus it
// grew from, the crashing input included.

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "baton/v1/baton.grpc.pb.h"
#include "common/session_protocol.h"
#include "common/shared_memory.h"
#include "common/submission_channel.h"
#include "common/tls_certificates.h"
#include "common/unix_socket.h"
#include "daemon/comm_proof.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/grpc_log.h"
#include "daemon/peer_client.h"
#include "daemon/peer_credentials.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "wire/op_codec.h"

namespace {

namespace v1 = baton::v1;

// Aborts (which libFuzzer reports, keeping the input) naming the broken expectation.
#define CHECK_OR_ABORT(condition)                                                   \
  do {                                                                              \
    if (!(condition)) {                                                             \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                 \
    }                                                                               \
  } while (false)

enum Method : uint8_t {
  kCreateCommId,
  kJoin,
  kDestroy,
  kCollective,
  kOpenChannel,
  kAbortCommunicator,
  kGetStatus,
  kExplain,
  kGetTopology,
  kJoinRank,
  kAbort,
  kProbe,
  kDataKey,
  kJoinThroughRoot,  // a client join whose root (the harness) answers with the input's plan
  kChannelSubmit,    // an operation written into a submission channel the daemon serves
  kMethods,
};

// Flag bits: what the harness puts in place of what the fuzzer cannot guess. The input's first
// three are inverted (an input's flags byte of 0 is a call by the harness's session, with its
// token, on its communicator), since most of what the handlers check lies past authentication.
constexpr uint8_t kOwnSession = 1 << 0;    // session_id: the harness's session
constexpr uint8_t kOwnToken = 1 << 1;      // the call carries that session's token
constexpr uint8_t kKnownComm = 1 << 2;     // comm_tag (and rank): a communicator it joined
constexpr uint8_t kKnownBuffers = 1 << 3;  // buffer ids: its data buffer and channel page
constexpr uint8_t kFreshId = 1 << 4;       // comm_id / secret: a fresh one of this daemon's
constexpr uint8_t kCertified = 1 << 5;     // the node name the caller's certificate names
constexpr uint8_t kValidProof = 1 << 6;    // an abort's proof over the communicator's secret
constexpr uint8_t kSelfInPlan = 1 << 7;    // the root's plan names this daemon first
constexpr uint8_t kInverted = kOwnSession | kOwnToken | kKnownComm;

// The addresses a daemon may dial that an input can name (Fixture::Dialable): these four, and
// malformed ones.
enum DialTarget : uint8_t { kSelfPeer, kSelfData, kRootPeer, kDeadPort, kDialTargets = 10 };
// A fuzzed address that stands for `address`.
std::string Pick(DialTarget address) { return std::string(1, static_cast<char>(address)); }

constexpr char kNode[] = "fuzz-node";  // the daemon
constexpr char kPeer[] = "fuzz-peer";  // the harness as a peer daemon
constexpr char kRoot[] = "fuzz-root";  // the harness as a root daemon
constexpr size_t kDataBytes = 1 << 16;
// Past this a call is taken to hang: well beyond every clamped timeout and the daemon's own
// bounded waits (a plan's link measurement takes at most 2 s), within libFuzzer's -timeout=10.
constexpr auto kCallBudget = std::chrono::seconds(6);

std::string ReadText(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  CHECK_OR_ABORT(static_cast<bool>(file));
}

int64_t Clamp(int64_t timeout_ms, int64_t most) {
  return 1 + static_cast<int64_t>(static_cast<uint64_t>(timeout_ms) % static_cast<uint64_t>(most));
}

// The harness as a root daemon: answers a forwarded join with the plan (or the error) the
// current input asks for, and a probe with its name; it issues no data keys (Unimplemented).
class FakeRoot final : public v1::Peer::Service {
 public:
  void Answer(grpc::Status status, v1::Plan plan) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(status);
    plan_ = std::move(plan);
  }

  grpc::Status JoinRank(grpc::ServerContext*, const v1::JoinRankRequest*,
                        v1::JoinRankResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) *response->mutable_plan() = plan_;
    return status_;
  }
  grpc::Status Probe(grpc::ServerContext*, const v1::ProbeRequest*,
                     v1::ProbeResponse* response) override {
    response->mutable_member()->set_node_name(kRoot);
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  v1::Plan plan_ ABSL_GUARDED_BY(mu_);
};

// A communicator the harness's session holds a rank of.
struct Joined {
  uint64_t tag = 0;
  int rank = 0;
  std::string secret;
  std::optional<v1::Plan> plan;  // the root's, when the harness was the root
};

class Fixture {
 public:
  Fixture() {
    // Print nothing per input: not the daemon's log, not gRPC's, not protobuf's complaints
    // about the strings of requests that fail to parse.
    google::protobuf::SetLogHandler(nullptr);
    spdlog::set_level(spdlog::level::off);
    setenv("GRPC_VERBOSITY", "NONE", 1);
    baton::daemon::RouteGrpcLogsToSpdlog();
    grpc_init();  // held for the run, as batond's main does
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    char dir[] = "/tmp/baton-proto-fuzz-XXXXXX";
    CHECK_OR_ABORT(mkdtemp(dir) != nullptr);
    dir_ = dir;
    WriteCertificates();
    StartRoot();
    ReserveDeadPort();
    StartDaemon();
    OpenSession();
    Track(JoinFresh());
  }

  // Stops the daemon and the root, and removes the temporary directory.
  ~Fixture() {
    while (!joined_.empty()) {
      TakeApart(joined_.back());
      joined_.pop_back();
    }
    close(session_fd_);
    daemon_->Shutdown();
    daemon_.reset();
    client_.reset();
    peer_.reset();
    root_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    root_server_.reset();
    close(dead_fd_);
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  // One input.
  void Run(Method method, uint8_t flags, const uint8_t* data, size_t size);

 private:
  void WriteCertificates() {
    absl::StatusOr<baton::DevCertificateAuthority> ca =
        baton::DevCertificateAuthority::Create("baton fuzz CA");
    CHECK_OR_ABORT(ca.ok());
    WriteText(dir_ + "/ca.pem", ca->certificate_pem());
    for (const char* name : {kNode, kPeer, kRoot}) {
      absl::StatusOr<baton::KeyAndCertificate> issued = ca->Issue(name);
      CHECK_OR_ABORT(issued.ok());
      WriteText(absl::StrCat(dir_, "/", name, ".pem"), issued->certificate_pem);
      WriteText(absl::StrCat(dir_, "/", name, ".key"), issued->key_pem);
    }
  }

  baton::daemon::TlsFiles FilesOf(const std::string& name) const {
    return {absl::StrCat(dir_, "/", name, ".pem"), absl::StrCat(dir_, "/", name, ".key"),
            dir_ + "/ca.pem"};
  }

  void StartRoot() {
    absl::StatusOr<baton::daemon::PeerTlsCredentials> tls =
        baton::daemon::PeerTlsCredentials::Load(FilesOf(kRoot), kRoot);
    CHECK_OR_ABORT(tls.ok());
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", tls->server(), &port);
    builder.RegisterService(&root_);
    root_server_ = builder.BuildAndStart();
    CHECK_OR_ABORT(root_server_ != nullptr && port != 0);
    root_address_ = absl::StrCat("127.0.0.1:", port);
  }

  // A loopback port bound and never listened on: connecting to it is refused at once.
  void ReserveDeadPort() {
    dead_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_OR_ABORT(bind(dead_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    socklen_t length = sizeof(address);
    CHECK_OR_ABORT(getsockname(dead_fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    dead_address_ = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  }

  void StartDaemon() {
    baton::daemon::Config config;
    config.node_name = kNode;
    config.socket = dir_ + "/batond.sock";
    config.peer_listen = "127.0.0.1:0";
    config.data_listen = "127.0.0.1:0";
    config.metrics_listen = "127.0.0.1:0";
    config.advertise_host = "127.0.0.1";
    config.ready_file = dir_ + "/ready";
    config.log_level = "off";
    config.probe_interval = absl::ZeroDuration();  // no background probes: inputs alone act
    config.peer_linger = absl::Seconds(1);
    config.op_timeout = absl::Milliseconds(200);
    config.data_handshake_timeout = absl::Milliseconds(200);
    config.max_pending_comm_ids = 1024;
    // The harness's own ids must never be refused: inputs may create ids with its session, and
    // join (pin) some; they expire soon.
    config.max_pending_comm_ids_per_uid = 1 << 20;
    config.comm_id_ttl = absl::Seconds(10);
    const baton::daemon::TlsFiles tls = FilesOf(kNode);
    config.tls_cert = tls.certificate;
    config.tls_key = tls.key;
    config.tls_ca = tls.ca;
    CHECK_OR_ABORT(baton::daemon::FinalizeConfig(config).ok());
    absl::StatusOr<std::unique_ptr<baton::daemon::Daemon>> daemon =
        baton::daemon::Daemon::Start(config);
    CHECK_OR_ABORT(daemon.ok());
    daemon_ = *std::move(daemon);
    std::map<std::string, std::string> ready;
    std::istringstream lines(ReadText(config.ready_file));
    for (std::string line; std::getline(lines, line);) {
      const size_t equals = line.find('=');
      if (equals != std::string::npos) ready[line.substr(0, equals)] = line.substr(equals + 1);
    }
    peer_address_ = ready["peer_address"];
    data_address_ = ready["data_address"];
    CHECK_OR_ABORT(!peer_address_.empty() && !data_address_.empty());
    socket_ = config.socket;

    client_ = v1::Client::NewStub(
        grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
    grpc::SslCredentialsOptions as_peer;
    as_peer.pem_root_certs = ReadText(tls.ca);
    as_peer.pem_private_key = ReadText(FilesOf(kPeer).key);
    as_peer.pem_cert_chain = ReadText(FilesOf(kPeer).certificate);
    grpc::ChannelArguments arguments;
    arguments.SetSslTargetNameOverride(kNode);
    peer_ = v1::Peer::NewStub(
        grpc::CreateCustomChannel(peer_address_, grpc::SslCredentials(as_peer), arguments));
    // What a fuzzed address becomes (see the top of this file), in DialTarget's order.
    dialable_ = {peer_address_, data_address_, root_address_, dead_address_, "127.0.0.1",
                 "127.0.0.1:0", "[::1]:1",     ":1",          "[::1",        "127.0.0.1:99999"};
    CHECK_OR_ABORT(dialable_.size() == kDialTargets);
  }

  // Opens the harness's session on the session socket and registers its buffers.
  void OpenSession() {
    absl::StatusOr<int> fd = baton::ConnectUnix(baton::session::SessionSocketPath(socket_));
    CHECK_OR_ABORT(fd.ok());
    session_fd_ = *fd;
    baton::session::Request open;
    open.type = static_cast<uint32_t>(baton::session::RequestType::kOpen);
    const baton::session::Reply opened = SessionCall(open, -1);
    session_id_ = opened.session_id;
    token_ = opened.token;
    absl::StatusOr<std::unique_ptr<baton::SharedMemory>> data =
        baton::SharedMemory::Create(kDataBytes, "fuzz-data");
    absl::StatusOr<std::unique_ptr<baton::SharedMemory>> page =
        baton::SharedMemory::Create(baton::channel::kChannelBytes, "fuzz-channel");
    CHECK_OR_ABORT(data.ok() && page.ok());
    data_ = *std::move(data);
    page_memory_ = *std::move(page);
    page_ = new (page_memory_->data()) baton::channel::Layout;
    page_->magic = baton::channel::kMagic;
    page_->version = baton::channel::kVersion;
    baton::session::Request registration;
    registration.type = static_cast<uint32_t>(baton::session::RequestType::kRegister);
    registration.size = kDataBytes;
    data_buffer_ = SessionCall(registration, data_->fd()).buffer_id;
    registration.size = baton::channel::kChannelBytes;
    page_buffer_ = SessionCall(registration, page_memory_->fd()).buffer_id;
  }

  baton::session::Reply SessionCall(const baton::session::Request& request, int pass_fd) const {
    CHECK_OR_ABORT(baton::SendPacket(session_fd_, &request, sizeof(request), pass_fd).ok());
    baton::session::Reply reply;
    int stray = -1;
    absl::StatusOr<size_t> got = baton::RecvPacket(session_fd_, &reply, sizeof(reply), &stray,
                                                   absl::Now() + absl::Seconds(10));
    CHECK_OR_ABORT(got.ok() && *got == sizeof(reply) && reply.code == 0 && stray < 0);
    return reply;
  }

  // A context for a call, carrying the harness's token when `with_token`.
  std::unique_ptr<grpc::ClientContext> Context(bool with_token) const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + kCallBudget);
    if (with_token) context->AddMetadata(baton::session::kTokenMetadata, token_);
    return context;
  }

  // Fails the run if a call took its whole budget: the daemon hangs.
  template <typename Call>
  grpc::Status Timed(Call call) {
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status = call();
    CHECK_OR_ABORT(std::chrono::steady_clock::now() - start < kCallBudget);
    return status;
  }

  // The address a fuzzed one stands for: its first byte picks (Pick).
  std::string Dialable(const std::string& address) const {
    if (address.empty()) return address;
    return dialable_[static_cast<uint8_t>(address[0]) % kDialTargets];
  }
  void Sanitize(v1::Member* member, uint8_t flags) const {
    member->set_peer_address(Dialable(member->peer_address()));
    member->set_data_address(Dialable(member->data_address()));
    for (v1::TransportAddress& transport : *member->mutable_transports()) {
      transport.set_address(Dialable(transport.address()));
    }
    if ((flags & kCertified) != 0) member->set_node_name(kPeer);
  }

  std::string FreshCommId() {
    v1::CreateCommIdRequest request;
    request.set_session_id(session_id_);
    v1::CreateCommIdResponse response;
    CHECK_OR_ABORT(client_->CreateCommId(Context(true).get(), request, &response).ok());
    return response.comm_id();
  }
  static std::string SecretOf(const std::string& comm_id) {
    return comm_id.substr(comm_id.rfind('/') + 1);
  }

  // A communicator of one rank, this daemon its root.
  Joined JoinFresh() {
    v1::JoinRequest request;
    request.set_session_id(session_id_);
    request.set_comm_id(FreshCommId());
    request.set_world_size(1);
    request.set_timeout_ms(1000);
    v1::JoinResponse response;
    CHECK_OR_ABORT(client_->Join(Context(true).get(), request, &response).ok());
    return Joined{response.comm_tag(), 0, SecretOf(request.comm_id()), std::nullopt};
  }

  // Remembers a communicator the session joined; the oldest beyond a few is taken apart, so that
  // communicators (each with a thread) do not pile up over a run.
  void Track(Joined joined) {
    for (const Joined& known : joined_) {
      if (known.tag == joined.tag && known.rank == joined.rank) return;
    }
    joined_.push_back(std::move(joined));
    while (joined_.size() > 3) {
      TakeApart(joined_.front());
      joined_.pop_front();
    }
  }

  // Aborts and destroys a communicator, attaching its rank again first if an input detached it
  // (a communicator whose other local ranks never attached stays until it fails).
  void TakeApart(const Joined& joined) {
    if (joined.plan.has_value()) {
      root_.Answer(grpc::Status::OK, *joined.plan);
      v1::JoinRequest request;
      request.set_session_id(session_id_);
      request.set_comm_id(absl::StrCat(root_address_, "/", joined.secret));
      request.set_world_size(joined.plan->world_size());
      request.set_rank(joined.rank);
      request.set_timeout_ms(1000);
      v1::JoinResponse response;
      (void)client_->Join(Context(true).get(), request, &response);
    }
    v1::AbortCommunicatorRequest abort;
    abort.set_session_id(session_id_);
    abort.set_comm_tag(joined.tag);
    abort.set_rank(joined.rank);
    v1::AbortCommunicatorResponse aborted;
    (void)client_->AbortCommunicator(Context(true).get(), abort, &aborted);
    v1::DestroyRequest destroy;
    destroy.set_session_id(session_id_);
    destroy.set_comm_tag(joined.tag);
    destroy.set_rank(joined.rank);
    v1::DestroyResponse destroyed;
    (void)client_->Destroy(Context(true).get(), destroy, &destroyed);
  }

  // The communicator that kKnownComm names: the latest one joined.
  const Joined& Current() {
    if (joined_.empty()) Track(JoinFresh());
    return joined_.back();
  }
  // After a call on the current communicator that says it is gone or failed, the next input
  // gets a fresh one (an aborted communicator answers every call the same way).
  void Retire(const grpc::Status& status) {
    const grpc::StatusCode code = status.error_code();
    if (joined_.empty() ||
        (code != grpc::StatusCode::ABORTED && code != grpc::StatusCode::UNAVAILABLE &&
         code != grpc::StatusCode::NOT_FOUND && code != grpc::StatusCode::DEADLINE_EXCEEDED)) {
      return;
    }
    TakeApart(joined_.back());
    joined_.pop_back();
    channel_open_ = false;
  }

  template <typename Request>
  void Address(Request& request, uint8_t flags) {
    if ((flags & kOwnSession) != 0) request.set_session_id(session_id_);
    if ((flags & kKnownComm) != 0) {
      request.set_comm_tag(Current().tag);
      request.set_rank(Current().rank);
    }
  }

  void Join(uint8_t flags, const uint8_t* data, size_t size);
  void JoinThroughRoot(uint8_t flags, const uint8_t* data, size_t size);
  void ChannelSubmit(uint8_t flags, const uint8_t* data, size_t size);

  std::string dir_;
  FakeRoot root_;
  std::unique_ptr<grpc::Server> root_server_;
  std::string root_address_;
  int dead_fd_ = -1;
  std::string dead_address_;
  std::unique_ptr<baton::daemon::Daemon> daemon_;
  std::string socket_;
  std::string peer_address_;
  std::string data_address_;
  std::vector<std::string> dialable_;
  std::unique_ptr<v1::Client::Stub> client_;
  std::unique_ptr<v1::Peer::Stub> peer_;
  int session_fd_ = -1;
  uint64_t session_id_ = 0;
  std::string token_;
  std::unique_ptr<baton::SharedMemory> data_;
  std::unique_ptr<baton::SharedMemory> page_memory_;
  baton::channel::Layout* page_ = nullptr;
  uint64_t data_buffer_ = 0;
  uint64_t page_buffer_ = 0;
  std::deque<Joined> joined_;
  bool channel_open_ = false;  // on the current communicator
};

void Fixture::Join(uint8_t flags, const uint8_t* data, size_t size) {
  v1::JoinRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  if ((flags & kOwnSession) != 0) request.set_session_id(session_id_);
  if ((flags & kFreshId) != 0) {
    request.set_comm_id(FreshCommId());
  } else if (const size_t slash = request.comm_id().rfind('/');
             slash > 0 && slash != std::string::npos) {
    // Any other root is this daemon: a join forwarded to a root that does not answer waits for
    // its whole deadline and then 2 s more (PeerClient::JoinRank), and kJoinThroughRoot has the
    // harness's root answer.
    request.set_comm_id(absl::StrCat(peer_address_, request.comm_id().substr(slash)));
  }
  request.set_timeout_ms(Clamp(request.timeout_ms(), 20));
  v1::JoinResponse response;
  grpc::Status status = Timed(
      [&] { return client_->Join(Context((flags & kOwnToken) != 0).get(), request, &response); });
  if (status.ok()) {
    Track(Joined{response.comm_tag(), request.rank(), SecretOf(request.comm_id()), std::nullopt});
  }
}

void Fixture::JoinThroughRoot(uint8_t flags, const uint8_t* data, size_t size) {
  if (size < 1) return;
  const size_t join_bytes = std::min<size_t>(data[0], size - 1);
  v1::JoinRequest request;
  if (!request.ParseFromArray(data + 1, static_cast<int>(join_bytes))) return;
  v1::Plan plan;
  const uint8_t* plan_data = data + 1 + join_bytes;
  const size_t plan_size = size - 1 - join_bytes;
  if (plan.ParseFromArray(plan_data, static_cast<int>(plan_size))) {
    for (v1::PlanDaemon& daemon : *plan.mutable_daemons()) {
      Sanitize(daemon.mutable_member(), flags);
    }
    if ((flags & kSelfInPlan) != 0) {
      v1::PlanDaemon* self = plan.add_daemons();
      self->mutable_member()->set_node_name(kNode);
      self->mutable_member()->set_peer_address(peer_address_);
      self->mutable_member()->set_data_address(data_address_);
      self->add_ranks(request.rank());
      plan.mutable_daemons()->SwapElements(0, plan.daemons_size() - 1);
    }
    root_.Answer(grpc::Status::OK, plan);
  } else {
    // Not a plan: the root answers with an error of the code the first byte names.
    const int code = plan_size == 0 ? 0 : 1 + plan_data[0] % 16;
    root_.Answer(grpc::Status(static_cast<grpc::StatusCode>(code), "the root refuses"), plan);
  }
  if ((flags & kOwnSession) != 0) request.set_session_id(session_id_);
  std::string secret = SecretOf(request.comm_id());
  if ((flags & kFreshId) != 0) secret = SecretOf(FreshCommId());
  request.set_comm_id(absl::StrCat(root_address_, "/", secret));
  request.set_timeout_ms(Clamp(request.timeout_ms(), 20));
  v1::JoinResponse response;
  grpc::Status status = Timed(
      [&] { return client_->Join(Context((flags & kOwnToken) != 0).get(), request, &response); });
  if (status.ok()) Track(Joined{response.comm_tag(), request.rank(), secret, plan});
}

void Fixture::ChannelSubmit(uint8_t flags, const uint8_t* data, size_t size) {
  if (!channel_open_) {
    v1::OpenChannelRequest request;
    request.set_session_id(session_id_);
    request.set_comm_tag(Current().tag);
    request.set_rank(Current().rank);
    request.set_buffer_id(page_buffer_);
    v1::OpenChannelResponse response;
    grpc::Status status =
        Timed([&] { return client_->OpenChannel(Context(true).get(), request, &response); });
    if (!status.ok()) {
      Retire(status);
      return;
    }
    channel_open_ = true;
  }
  if (page_->closed.load() != 0) {
    channel_open_ = false;
    return;
  }
  baton::channel::OpDescriptor op;
  const size_t op_bytes = std::min(size, sizeof(op));
  std::memcpy(&op, data, op_bytes);
  baton::channel::VectorTail tail;
  if (size > op_bytes) {
    std::memcpy(&tail, data + op_bytes, std::min(size - op_bytes, sizeof(tail)));
  }
  if ((flags & kKnownBuffers) != 0) {
    op.send_buffer = data_buffer_;
    op.recv_buffer = data_buffer_;
  }
  op.timeout_ms = Clamp(op.timeout_ms, 20);
  page_->op = op;
  page_->vectors = tail;
  const uint32_t previous = page_->submitted.load();
  baton::channel::Publish(page_->submitted, previous + 1, page_->daemon_sleeping);
  const absl::Status waited = baton::channel::WaitForChange(
      page_->completed, previous, page_->client_sleeping, absl::Microseconds(20),
      absl::Now() + absl::Seconds(6), [this]() -> absl::Status {
        if (page_->closed.load() != 0) return absl::UnavailableError("closed");
        return absl::OkStatus();
      });
  if (!waited.ok()) {
    CHECK_OR_ABORT(
        absl::IsUnavailable(waited));  // the daemon must answer or close, never ignore it
    channel_open_ = false;
    return;
  }
  std::string algorithm;
  const absl::Status result = baton::channel::ReadResult(page_->result, &algorithm);
  if (absl::IsAborted(result) || absl::IsDeadlineExceeded(result)) {
    Retire(grpc::Status(static_cast<grpc::StatusCode>(result.code()), ""));
  }
}

void Fixture::Run(Method method, uint8_t flags, const uint8_t* data, size_t size) {
  const int length = static_cast<int>(size);
  const bool token = (flags & kOwnToken) != 0;
  switch (method) {
    case kCreateCommId: {
      v1::CreateCommIdRequest request;
      v1::CreateCommIdResponse response;
      if (!request.ParseFromArray(data, length)) return;
      Timed([&] { return client_->CreateCommId(Context(token).get(), request, &response); });
      return;
    }
    case kJoin:
      Join(flags, data, size);
      return;
    case kDestroy: {
      v1::DestroyRequest request;
      v1::DestroyResponse response;
      if (!request.ParseFromArray(data, length)) return;
      Address(request, flags);
      grpc::Status status =
          Timed([&] { return client_->Destroy(Context(token).get(), request, &response); });
      if (status.ok() && (flags & kKnownComm) != 0) {
        joined_.pop_back();  // gone (or detached: it cannot be taken apart through this rank)
        channel_open_ = false;
      }
      return;
    }
    case kCollective: {
      v1::CollectiveRequest request;
      v1::CollectiveResponse response;
      if (!request.ParseFromArray(data, length)) return;
      Address(request, flags);
      if ((flags & kKnownBuffers) != 0) {
        request.mutable_send()->set_buffer_id(data_buffer_);
        request.mutable_recv()->set_buffer_id(data_buffer_);
      }
      request.set_timeout_ms(Clamp(request.timeout_ms(), 20));
      grpc::Status status =
          Timed([&] { return client_->Collective(Context(token).get(), request, &response); });
      if ((flags & kKnownComm) != 0) Retire(status);
      return;
    }
    case kOpenChannel: {
      v1::OpenChannelRequest request;
      v1::OpenChannelResponse response;
      if (!request.ParseFromArray(data, length)) return;
      Address(request, flags);
      if ((flags & kKnownBuffers) != 0) request.set_buffer_id(page_buffer_);
      grpc::Status status =
          Timed([&] { return client_->OpenChannel(Context(token).get(), request, &response); });
      // A channel opened on the page replaces the harness's own (or serves it anew).
      if (status.ok() && request.buffer_id() == page_buffer_) channel_open_ = false;
      return;
    }
    case kAbortCommunicator: {
      v1::AbortCommunicatorRequest request;
      v1::AbortCommunicatorResponse response;
      if (!request.ParseFromArray(data, length)) return;
      Address(request, flags);
      grpc::Status status = Timed(
          [&] { return client_->AbortCommunicator(Context(token).get(), request, &response); });
      if (status.ok() && (flags & kKnownComm) != 0) Retire(grpc::Status(grpc::ABORTED, ""));
      return;
    }
    case kGetStatus: {
      v1::GetStatusRequest request;
      v1::DaemonStatus response;
      if (!request.ParseFromArray(data, length)) return;
      Timed([&] { return client_->GetStatus(Context(token).get(), request, &response); });
      return;
    }
    case kExplain: {
      v1::ExplainRequest request;
      v1::ExplainResponse response;
      if (!request.ParseFromArray(data, length)) return;
      if ((flags & kOwnSession) != 0) request.set_session_id(session_id_);
      if ((flags & kKnownComm) != 0) request.set_comm_tag(Current().tag);
      Timed([&] { return client_->Explain(Context(token).get(), request, &response); });
      return;
    }
    case kGetTopology: {
      v1::GetTopologyRequest request;
      v1::Topology response;
      if (!request.ParseFromArray(data, length)) return;
      Timed([&] { return client_->GetTopology(Context(token).get(), request, &response); });
      return;
    }
    case kJoinRank: {
      v1::JoinRankRequest request;
      v1::JoinRankResponse response;
      if (!request.ParseFromArray(data, length)) return;
      if ((flags & kFreshId) != 0) request.set_secret(SecretOf(FreshCommId()));
      Sanitize(request.mutable_member(), flags);
      request.set_timeout_ms(Clamp(request.timeout_ms(), 20) - 1);
      Timed([&] { return peer_->JoinRank(Context(false).get(), request, &response); });
      return;
    }
    case kAbort: {
      v1::AbortRequest request;
      v1::AbortResponse response;
      if (!request.ParseFromArray(data, length)) return;
      if ((flags & kKnownComm) != 0) request.set_comm_tag(Current().tag);
      if ((flags & kCertified) != 0) request.set_from_node(kPeer);
      if ((flags & kValidProof) != 0) {
        const Joined& comm = Current();
        request.set_proof(baton::daemon::AbortProof(comm.secret, request.comm_tag(),
                                                    baton::daemon::AbortNoticeFromProto(request),
                                                    request.from_node()));
      }
      grpc::Status status =
          Timed([&] { return peer_->Abort(Context(false).get(), request, &response); });
      if (status.ok() && (flags & kKnownComm) != 0) Retire(grpc::Status(grpc::ABORTED, ""));
      return;
    }
    case kProbe: {
      v1::ProbeRequest request;
      v1::ProbeResponse response;
      if (!request.ParseFromArray(data, length)) return;
      Timed([&] { return peer_->Probe(Context(false).get(), request, &response); });
      return;
    }
    case kDataKey: {
      v1::DataKeyRequest request;
      v1::DataKeyResponse response;
      if (!request.ParseFromArray(data, length)) return;
      grpc::Status status =
          Timed([&] { return peer_->DataKey(Context(false).get(), request, &response); });
      if (status.ok()) CHECK_OR_ABORT(response.key().size() == 32);
      return;
    }
    case kJoinThroughRoot:
      JoinThroughRoot(flags, data, size);
      return;
    case kChannelSubmit:
      ChannelSubmit(flags, data, size);
      return;
    case kMethods:
      return;
  }
}

// Seed inputs: one call of each kind that gets past the first checks, so that a short run (CI
// fuzzes for seconds) starts from the handlers' depths rather than from their refusals.
std::string Input(Method method, uint8_t flags, const std::string& payload) {
  std::string input;
  input.push_back(static_cast<char>(method));
  input.push_back(static_cast<char>(flags ^ kInverted));
  return input + payload;
}

std::string CollectiveSeed(const baton::collective::OpSpec& spec, uint64_t send_offset,
                           uint64_t recv_offset) {
  v1::CollectiveRequest request;
  baton::wire::ToProto(spec, &request);
  request.mutable_send()->set_offset(send_offset);
  request.mutable_recv()->set_offset(recv_offset);
  request.set_timeout_ms(10);
  return Input(kCollective, kOwnSession | kOwnToken | kKnownComm | kKnownBuffers,
               request.SerializeAsString());
}

std::vector<std::pair<std::string, std::string>> Seeds() {
  namespace collective = baton::collective;
  constexpr uint8_t kAuthenticated = kOwnSession | kOwnToken;
  std::vector<std::pair<std::string, std::string>> seeds;
  seeds.emplace_back("create-comm-id", Input(kCreateCommId, 0, ""));
  v1::JoinRequest join;
  join.set_world_size(1);
  join.set_timeout_ms(10);
  seeds.emplace_back("join", Input(kJoin, kAuthenticated | kFreshId, join.SerializeAsString()));
  join.set_world_size(3);
  join.set_rank(2);
  seeds.emplace_back("join-unmatched",
                     Input(kJoin, kAuthenticated | kFreshId, join.SerializeAsString()));
  seeds.emplace_back("destroy", Input(kDestroy, kAuthenticated | kKnownComm, ""));

  collective::OpSpec spec;
  spec.count = 1024;
  seeds.emplace_back("all-reduce", CollectiveSeed(spec, 0, 4096));
  spec.collective = collective::Collective::kBroadcast;
  spec.type = collective::DataType::kUint8;
  spec.algorithm = collective::Algorithm::kRing;
  seeds.emplace_back("broadcast", CollectiveSeed(spec, 0, 0));
  spec = {};
  spec.collective = collective::Collective::kAllToAllV;
  spec.type = collective::DataType::kInt64;
  spec.send_counts = {8};
  spec.send_displs = {0};
  spec.recv_counts = {8};
  spec.recv_displs = {16};
  seeds.emplace_back("all-to-all-v", CollectiveSeed(spec, 0, 128));
  spec = {};
  spec.collective = collective::Collective::kSend;
  spec.count = 4;
  seeds.emplace_back("send", CollectiveSeed(spec, 0, 0));

  v1::OpenChannelRequest open;
  seeds.emplace_back(
      "open-channel",
      Input(kOpenChannel, kAuthenticated | kKnownComm | kKnownBuffers, open.SerializeAsString()));
  v1::AbortCommunicatorRequest abort;
  abort.set_reason("fuzz");
  seeds.emplace_back("abort-communicator", Input(kAbortCommunicator, kAuthenticated | kKnownComm,
                                                 abort.SerializeAsString()));
  v1::GetStatusRequest status;
  status.set_probe_links(true);
  seeds.emplace_back("get-status", Input(kGetStatus, 0, status.SerializeAsString()));
  v1::ExplainRequest explain;
  explain.set_collective("all_reduce");
  explain.set_data_type("bfloat16");
  explain.set_count(1 << 20);
  seeds.emplace_back("explain",
                     Input(kExplain, kAuthenticated | kKnownComm, explain.SerializeAsString()));
  seeds.emplace_back("get-topology", Input(kGetTopology, 0, ""));

  v1::Member member;
  member.set_node_name(kPeer);
  member.set_peer_address(Pick(kRootPeer));
  member.set_data_address(Pick(kDeadPort));
  member.add_locality("pod-a");
  member.add_locality("rack-1");
  v1::TransportAddress* tcp = member.add_transports();
  tcp->set_transport("tcp");
  tcp->set_address(Pick(kDeadPort));
  v1::JoinRankRequest join_rank;
  join_rank.set_world_size(1);
  *join_rank.mutable_member() = member;
  seeds.emplace_back("join-rank",
                     Input(kJoinRank, kFreshId | kCertified, join_rank.SerializeAsString()));
  v1::AbortRequest peer_abort;
  peer_abort.set_code(static_cast<int>(absl::StatusCode::kUnavailable));
  peer_abort.set_message("peer gone");
  seeds.emplace_back("abort", Input(kAbort, kKnownComm | kCertified | kValidProof,
                                    peer_abort.SerializeAsString()));
  v1::ProbeRequest probe;
  probe.set_payload(std::string(64, 'p'));
  probe.set_reply_bytes(32);
  seeds.emplace_back("probe", Input(kProbe, 0, probe.SerializeAsString()));
  v1::DataKeyRequest key;
  key.set_address("127.0.0.1:7461");
  seeds.emplace_back("data-key", Input(kDataKey, 0, key.SerializeAsString()));

  // A plan of two daemons, this one (kSelfInPlan) with rank 0 and the root with rank 1.
  join.set_world_size(2);
  join.set_rank(0);
  v1::Plan plan;
  plan.set_comm_tag(0x5eed);
  plan.set_world_size(2);
  plan.set_chunk_bytes(1 << 16);
  plan.set_link_alpha_seconds(2e-5);
  plan.set_link_bytes_per_second(1e9);
  v1::PlanDaemon* other = plan.add_daemons();
  *other->mutable_member() = member;
  other->add_ranks(1);
  const std::string join_bytes = join.SerializeAsString();
  seeds.emplace_back("join-through-root",
                     Input(kJoinThroughRoot, kAuthenticated | kFreshId | kSelfInPlan | kCertified,
                           std::string(1, static_cast<char>(join_bytes.size())) + join_bytes +
                               plan.SerializeAsString()));

  spec = {};
  spec.count = 256;
  baton::channel::OpDescriptor op;
  baton::channel::VectorTail tail;
  CHECK_OR_ABORT(baton::wire::ToChannel(spec, &op, &tail).ok());
  op.recv_offset = 1024;
  seeds.emplace_back("channel-submit",
                     Input(kChannelSubmit, kKnownBuffers,
                           std::string(reinterpret_cast<const char*>(&op), sizeof(op))));
  return seeds;
}

}  // namespace

// With BATON_FUZZ_SEEDS naming the corpus directory (scripts/fuzz.sh), writes the seed inputs
// there before libFuzzer reads it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("BATON_FUZZ_SEEDS"); dir != nullptr && *dir != '\0') {
    for (const auto& [name, input] : Seeds()) WriteText(absl::StrCat(dir, "/seed-", name), input);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One daemon for the run, shut down at its exit() (before the libraries' statics go, which
  // its threads use, and before LeakSanitizer looks).
  static Fixture* const fixture = [] {
    auto* created = new Fixture();
    std::atexit([] { delete fixture; });
    return created;
  }();
  if (size < 2) return 0;
  const uint8_t flags = data[1] ^ kInverted;
  fixture->Run(static_cast<Method>(data[0] % kMethods), flags, data + 2, size - 2);
  return 0;
}
