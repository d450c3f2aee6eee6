// Daemons exchange per-pair connection data over the peer API when a communicator forms
// (Node::ConnectPeers, Peer.ConnectPair): two nodes in this process, each serving its peer API on
// loopback, whose data plane is an in-memory fabric that carries nothing between endpoints that
// have not exchanged connection data (as verbs' queue pairs).

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/unix_socket.h"
#include "daemon/comm_proof.h"
#include "daemon/config.h"
#include "daemon/node.h"
#include "daemon/peer_credentials.h"
#include "daemon/peer_service.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "transport/inmemory/inmemory_transport.h"

namespace baton::daemon {
namespace {

using ::testing::HasSubstr;

absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

// Held for the whole run, as batond's main does: otherwise the last channel or server that a
// test's teardown destroys runs grpc_shutdown while gRPC's own threads still unwind the calls
// of that test (an assertion in gRPC's reference counting, seen once under load).
[[maybe_unused]] const bool kGrpcHeld = (grpc_init(), true);

// One daemon: its data endpoint on the fabric, its peer API on a loopback port, its node.
class InProcessDaemon {
 public:
  InProcessDaemon(transport::InMemoryFabric& fabric, const std::string& name,
                  const std::string& data_address) {
    absl::StatusOr<std::unique_ptr<transport::Endpoint>> endpoint =
        fabric.CreateEndpoint(data_address);
    EXPECT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *std::move(endpoint);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    EXPECT_NE(port, 0);
    Config config;
    config.node_name = name;
    absl::StatusOr<PeerTlsCredentials> credentials = PeerTlsCredentials::Load({}, name);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    node_ = std::make_unique<Node>(config,
                                   Member{name, absl::StrCat("127.0.0.1:", port), data_address, {}},
                                   endpoint_.get(), nullptr, NodeTopology{}, *credentials);
    service_.SetNode(node_.get());
    absl::StatusOr<SessionRegistry::Grant> session =
        node_->sessions().Open(PeerCredentials{getpid(), getuid(), getgid()}, "test");
    EXPECT_TRUE(session.ok()) << session.status();
    session_ = session->id;
  }
  ~InProcessDaemon() {
    node_->StopLinkMonitor();
    node_->AbortAll(absl::UnavailableError("test over"));
    node_->CloseAllChannels();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(3));
    node_.reset();
  }

  Node& node() { return *node_; }
  transport::Endpoint& endpoint() { return *endpoint_; }
  uint64_t session() const { return session_; }

 private:
  std::unique_ptr<transport::Endpoint> endpoint_;
  PeerService service_{/*certified_peers=*/false, nullptr};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Node> node_;
  uint64_t session_ = 0;
};

class ConnectionDataTest : public ::testing::Test {
 protected:
  std::unique_ptr<transport::InMemoryFabric> fabric_ =
      transport::NewInMemoryFabric({.require_connection_data = true});
  InProcessDaemon a_{*fabric_, "node-a", "mem-a"};
  InProcessDaemon b_{*fabric_, "node-b", "mem-b"};
};

TEST_F(ConnectionDataTest, DaemonsOfACommunicatorExchangeItAndTheirLinkCarriesMessages) {
  // Before any communicator, the two data endpoints have no link.
  EXPECT_EQ(a_.endpoint().Send("mem-b", transport::Tag{.seq = 1}, {}, Deadline()).code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::string> comm_id = a_.node().CreateCommId(a_.session());
  ASSERT_TRUE(comm_id.ok()) << comm_id.status();
  absl::StatusOr<JoinResult> joined_b;
  std::thread rank1([&] { joined_b = b_.node().Join(b_.session(), *comm_id, 2, 1, Deadline()); });
  absl::StatusOr<JoinResult> joined_a = a_.node().Join(a_.session(), *comm_id, 2, 0, Deadline());
  rank1.join();
  ASSERT_TRUE(joined_a.ok()) << joined_a.status();
  ASSERT_TRUE(joined_b.ok()) << joined_b.status();
  EXPECT_EQ(joined_a->daemon_count, 2);

  // The exchange connected both ends: messages of the communicator flow both ways.
  const uint64_t comm = joined_a->comm_tag;
  const std::vector<std::byte> hello(5, std::byte{7});
  ASSERT_TRUE(
      a_.endpoint().Send("mem-b", transport::Tag{.comm = comm, .seq = 1}, hello, Deadline()).ok());
  std::vector<std::byte> received(5);
  ASSERT_TRUE(b_.endpoint()
                  .Recv("mem-a", transport::Tag{.comm = comm, .seq = 1}, received, Deadline())
                  .ok());
  EXPECT_EQ(received, hello);
  ASSERT_TRUE(
      b_.endpoint().Send("mem-a", transport::Tag{.comm = comm, .seq = 2}, hello, Deadline()).ok());
  ASSERT_TRUE(a_.endpoint()
                  .Recv("mem-b", transport::Tag{.comm = comm, .seq = 2}, received, Deadline())
                  .ok());
}

// Connection data is taken only from a daemon of the plan that proves it holds the secret.
TEST_F(ConnectionDataTest, DataWithoutProofOrFromOutsideThePlanIsRefused) {
  absl::StatusOr<std::string> comm_id = a_.node().CreateCommId(a_.session());
  ASSERT_TRUE(comm_id.ok()) << comm_id.status();
  absl::StatusOr<JoinResult> joined_b;
  std::thread rank1([&] { joined_b = b_.node().Join(b_.session(), *comm_id, 2, 1, Deadline()); });
  absl::StatusOr<JoinResult> joined_a = a_.node().Join(a_.session(), *comm_id, 2, 0, Deadline());
  rank1.join();
  ASSERT_TRUE(joined_a.ok() && joined_b.ok());
  const uint64_t comm = joined_a->comm_tag;
  absl::StatusOr<std::string> data = a_.endpoint().ConnectionData("mem-b");
  ASSERT_TRUE(data.ok());

  const absl::StatusOr<Node::PairData> forged = b_.node().ConnectPairFromPeer(
      comm, "node-a", "mem-a", *data, std::string(64, '0'), Deadline());
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(forged.status().message(), HasSubstr("proof"));
  // A proof made with the right secret, but naming another node than the plan's.
  const std::string secret = comm_id->substr(comm_id->rfind('/') + 1);
  const absl::StatusOr<Node::PairData> outsider = b_.node().ConnectPairFromPeer(
      comm, "node-x", "mem-a", *data, ConnectionDataProof(secret, comm, "mem-a", "mem-b", *data),
      Deadline());
  EXPECT_EQ(outsider.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(outsider.status().message(), HasSubstr("not a daemon of its plan"));
  // The real thing is taken, and answered with b's data for a and its proof.
  const absl::StatusOr<Node::PairData> answer = b_.node().ConnectPairFromPeer(
      comm, "node-a", "mem-a", *data, ConnectionDataProof(secret, comm, "mem-a", "mem-b", *data),
      Deadline());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->data, *b_.endpoint().ConnectionData("mem-a"));
  EXPECT_EQ(answer->proof, ConnectionDataProof(secret, comm, "mem-b", "mem-a", answer->data));
  // An unknown communicator: nothing to connect, after a bounded wait.
  EXPECT_EQ(b_.node()
                .ConnectPairFromPeer(comm + 1, "node-a", "mem-a", *data, "",
                                     absl::Now() + absl::Milliseconds(50))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace baton::daemon
