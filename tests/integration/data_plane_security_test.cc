// The daemons' data port attacked from this machine, as a host on the cluster network could:
// a process that claims to be a peer daemon gets no data and injects none, and connections that
// never introduce themselves cost the daemon nothing that lasts.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/v1/baton.grpc.pb.h"
#include "common/aead.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/test_cluster.h"
#include "tests/testing/peer_stub.h"
#include "transport/auth/record_cipher.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/handshake_io.h"
#include "transport/tcp/socket.h"

namespace baton {
namespace {

using testing::NewCommId;
using testing::TestCluster;
using transport::FileDescriptor;

FileDescriptor ConnectTo(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &peer.sin_addr);
  FileDescriptor fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&peer), sizeof(peer)), 0);
  return fd;
}

// Blocks until the other end closes `fd` (or 10 s pass): true if it closed.
bool ClosedByPeer(int fd) {
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
  }
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

size_t OpenFds(pid_t pid) {
  std::error_code error;
  size_t count = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    ++count;
  }
  return count;
}

// The data key `issuer` gives `as` (the test holding `as`'s certificate) for `as`'s data
// address, over mutual TLS, as a daemon fetches it before it connects; nothing on failure.
std::optional<transport::HandshakeKey> FetchDataKey(const client::LocalDaemon& issuer,
                                                    const client::LocalDaemon& as) {
  auto peer = testing::PeerStub(issuer, testing::IdentityOf(as));
  grpc::ClientContext context;
  v1::DataKeyRequest request;
  request.set_address(as.data_address);
  v1::DataKeyResponse response;
  const grpc::Status fetched = peer->DataKey(&context, request, &response);
  transport::HandshakeKey key;
  if (!fetched.ok() || response.key().size() != key.size()) {
    ADD_FAILURE() << "DataKey: " << fetched.error_message() << ", " << response.key().size()
                  << " bytes";
    return std::nullopt;
  }
  std::memcpy(key.data(), response.key().data(), key.size());
  return key;
}

// A data frame as the end of a connection with `stream` (its ciphers, if the handshake agreed on
// records: sealed or authenticated) writes it.
std::vector<std::byte> DataFrame(std::optional<transport::tcp::SealedStream>& stream,
                                 const transport::Tag& tag, size_t payload_bytes) {
  transport::FrameHeader header{transport::FrameType::kData, tag, payload_bytes};
  std::vector<std::byte> frame(transport::kFrameHeaderBytes + payload_bytes);
  const auto header_bytes = std::span<std::byte, transport::kFrameHeaderBytes>(
      frame.data(), transport::kFrameHeaderBytes);
  if (!stream.has_value()) {
    transport::EncodeFrameHeader(header, header_bytes);
    return frame;
  }
  transport::RecordCipher& seal = stream->seal;
  header.set_protection(seal.encrypts() ? transport::Protection::kSealed
                                        : transport::Protection::kAuthenticated);
  transport::EncodeFrameHeader(header, header_bytes);
  seal.Begin(header_bytes);
  seal.Update(std::span(frame).subspan(transport::kFrameHeaderBytes),
              frame.data() + transport::kFrameHeaderBytes);
  const absl::StatusOr<AeadTag> record_tag = seal.Seal();
  EXPECT_TRUE(record_tag.ok()) << record_tag.status();
  if (record_tag.ok()) frame.insert(frame.end(), record_tag->begin(), record_tag->end());
  return frame;
}

// Sums rank-dependent inputs of `elements` floats over `ranks` ranks, one on each of the first
// `ranks` daemons, `rounds` times, checking every element.
void AllReduceRounds(const TestCluster& cluster, int rounds, int ranks = 2,
                     size_t elements = 4096) {
  testing::RunRanks(
      cluster, NewCommId(cluster), ranks, testing::BlockPlacement(ranks, ranks),
      [&](int rank, Communicator& comm) {
        std::vector<float> data(elements);
        for (int round = 0; round < rounds; ++round) {
          for (size_t i = 0; i < data.size(); ++i) {
            data[i] = static_cast<float>(rank * 100 + round + i % 7);
          }
          ASSERT_TRUE(comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                     ReduceOp::kSum)
                          .ok());
          const int rank_sum = ranks * (ranks - 1) / 2;
          for (size_t i = 0; i < data.size(); ++i) {
            ASSERT_EQ(data[i], static_cast<float>(100 * rank_sum + ranks * (round + i % 7)))
                << "round " << round << " element " << i;
          }
        }
        EXPECT_TRUE(comm.Destroy().ok());
      });
}

// With mutual TLS, a data connection is believed only if it proves the key the receiving daemon
// issued for the address it claims, over TLS, to the daemon certified for it. An impostor that
// claims node-1's address to node-0 cannot prove it, is closed before any frame of it is read,
// and the two daemons' all-reduces stay right.
TEST(DataPlaneSecurityTest, APeerImpostorGetsNoDataAndInjectsNothing) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  AllReduceRounds(cluster, 2);  // node-0 and node-1 have connected
  const client::LocalDaemon& victim = cluster.daemons()[0];
  const client::LocalDaemon& impersonated = cluster.daemons()[1];
  for (int attempt = 0; attempt < 20; ++attempt) {
    FileDescriptor fd = ConnectTo(victim.data_address);
    const absl::Status introduced =
        transport::tcp::Introduce(fd.get(), impersonated.data_address, victim.data_address,
                                  transport::kNoHandshakeKey, /*seal=*/false,
                                  absl::Now() + absl::Seconds(10), [] { return false; })
            .status();
    EXPECT_TRUE(absl::IsPermissionDenied(introduced)) << introduced;
    // Past the failed proof: a forged proof and a data frame for the next operations.
    std::vector<std::byte> frames(2 * transport::kFrameHeaderBytes +
                                  transport::kHandshakeProofBytes + 64);
    transport::EncodeFrameHeader(
        transport::FrameHeader{transport::FrameType::kProof, {}, transport::kHandshakeProofBytes},
        std::span<std::byte, transport::kFrameHeaderBytes>(frames.data(),
                                                           transport::kFrameHeaderBytes));
    (void)!write(fd.get(), frames.data(), frames.size());
    EXPECT_TRUE(ClosedByPeer(fd.get()));
  }
  AllReduceRounds(cluster, 20);
}

// The value of the sample `name{local_node="<node>"}` on `daemon`'s /metrics page; -1 if absent.
double NodeSample(const client::LocalDaemon& daemon, const std::string& name) {
  const std::string page = testing::HttpGet(daemon.metrics_address, "/metrics");
  const std::string key = absl::StrCat(name, "{local_node=\"", daemon.node_name, "\"} ");
  const size_t at = page.find(key);
  if (at == std::string::npos) return -1;
  double value = -1;
  const size_t end = page.find('\n', at);
  if (!absl::SimpleAtod(page.substr(at + key.size(), end - at - key.size()), &value)) return -1;
  return value;
}

// A daemon that is certified, and so may open data connections, is still not a member of every
// communicator: node-2 (here, the test holding node-2's certificate) fetches a data key from
// node-0 and connects, but the frames it sends for node-0 and node-1's communicator are dropped
// as they arrive and counted, and the communicator's all-reduces stay right.
TEST(DataPlaneSecurityTest, ACertifiedDaemonOutsideTheCommunicatorIsRefused) {
  TestCluster cluster(3);
  ASSERT_TRUE(cluster.ok());
  const client::LocalDaemon& victim = cluster.daemons()[0];
  const client::LocalDaemon& outsider = cluster.daemons()[2];
  const std::string id = NewCommId(cluster);
  testing::RunRanks(
      cluster, id, 2, testing::BlockPlacement(2, 2), [&](int rank, Communicator& comm) {
        std::vector<float> data(4096, static_cast<float>(rank + 1));
        ASSERT_TRUE(comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                   ReduceOp::kSum)
                        .ok());
        if (rank == 0) {
          // What anyone on the node may see: the communicator's tag.
          auto client = v1::Client::NewStub(
              grpc::CreateChannel("unix://" + victim.socket, grpc::InsecureChannelCredentials()));
          grpc::ClientContext status_context;
          v1::DaemonStatus status;
          ASSERT_TRUE(client->GetStatus(&status_context, v1::GetStatusRequest(), &status).ok());
          ASSERT_EQ(status.communicators_size(), 1);
          const uint64_t tag = status.communicators(0).comm_tag();

          // node-2's key for its own data address, and a connection that proves it.
          const std::optional<transport::HandshakeKey> key = FetchDataKey(victim, outsider);
          ASSERT_TRUE(key.has_value());
          FileDescriptor fd = ConnectTo(victim.data_address);
          absl::StatusOr<std::optional<transport::tcp::SealedStream>> stream =
              transport::tcp::Introduce(fd.get(), outsider.data_address, victim.data_address, *key,
                                        /*seal=*/false, absl::Now() + absl::Seconds(10),
                                        [] { return false; });
          ASSERT_TRUE(stream.ok()) << stream.status();
          // Frames of the communicator's next operations, as a member would send them (on
          // the connection's terms: authenticated, as certified daemons' connections are by
          // default).
          constexpr int kFrames = 50;
          for (int i = 0; i < kFrames; ++i) {
            const std::vector<std::byte> frame =
                DataFrame(*stream,
                          transport::Tag{.comm = tag,
                                         .seq = static_cast<uint64_t>(2 + i / 10),
                                         .step = static_cast<uint32_t>(i % 10)},
                          64);
            ASSERT_EQ(write(fd.get(), frame.data(), frame.size()),
                      static_cast<ssize_t>(frame.size()));
          }
          const absl::Time until = absl::Now() + absl::Seconds(10);
          while (NodeSample(victim, "baton_data_refused_messages_total") < kFrames &&
                 absl::Now() < until) {
            absl::SleepFor(absl::Milliseconds(20));
          }
          EXPECT_EQ(NodeSample(victim, "baton_data_refused_messages_total"), kFrames);
        }
        for (int round = 0; round < 20; ++round) {
          for (size_t i = 0; i < data.size(); ++i)
            data[i] = static_cast<float>(rank * 10) + static_cast<float>(i % 5);
          ASSERT_TRUE(comm.AllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                     ReduceOp::kSum)
                          .ok());
          for (size_t i = 0; i < data.size(); ++i) {
            ASSERT_EQ(data[i], static_cast<float>(10 + 2 * (i % 5))) << "round " << round;
          }
        }
      });
}

// Thousands of connections that never finish a handshake are closed (after
// data_handshake_timeout, or at once beyond 64 waiting), leave no descriptor behind, and do not
// keep the daemons from forming communicators.
TEST(DataPlaneSecurityTest, ConnectionsThatNeverIntroduceThemselvesLeaveNothingBehind) {
  TestCluster cluster(2, {"--data-handshake-timeout=500ms"});
  ASSERT_TRUE(cluster.ok());
  AllReduceRounds(cluster, 1);
  const client::LocalDaemon& target = cluster.daemons()[0];
  const size_t before = OpenFds(target.pid);
  for (int batch = 0; batch < 5; ++batch) {
    std::vector<FileDescriptor> silent;
    silent.reserve(400);
    for (int i = 0; i < 400; ++i) silent.push_back(ConnectTo(target.data_address));
    for (FileDescriptor& fd : silent) EXPECT_TRUE(ClosedByPeer(fd.get()));
  }
  AllReduceRounds(cluster, 2);
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (OpenFds(target.pid) > before + 4 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_LE(OpenFds(target.pid), before + 4);
}

// With data_encryption every data connection is sealed: three daemons' all-reduces of several
// sealed records per message come out right, no link counts a seal failure or an error, and
// each daemon says that it seals.
TEST(DataPlaneSecurityTest, AnEncryptingClusterReducesRightOverSealedConnections) {
  TestCluster cluster(3, {"--data-encryption=true"});
  ASSERT_TRUE(cluster.ok());
  AllReduceRounds(cluster, 3, /*ranks=*/3, /*elements=*/(size_t{1} << 20) + 5);  // 4 MiB
  for (const client::LocalDaemon& daemon : cluster.daemons()) {
    const std::string page = testing::HttpGet(daemon.metrics_address, "/metrics");
    for (const client::LocalDaemon& peer : cluster.daemons()) {
      if (peer.node_name == daemon.node_name) continue;
      const std::string labels = absl::StrCat("{local_node=\"", daemon.node_name, "\",peer_node=\"",
                                              peer.node_name, "\",transport=\"tcp\"} ");
      EXPECT_NE(page.find("baton_link_seal_failures_total" + labels + "0\n"), std::string::npos)
          << daemon.node_name << " -> " << peer.node_name << "\n"
          << page;
      EXPECT_NE(page.find("baton_link_errors_total" + labels + "0\n"), std::string::npos)
          << daemon.node_name << " -> " << peer.node_name;
    }
    std::ifstream log(daemon.log);
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("data connections are sealed"), std::string::npos) << daemon.log;
  }
  // A connection node-2 opens to node-0 without asking for a seal is sealed all the same (node-0
  // seals every connection), and an unsealed frame on it closes it.
  const client::LocalDaemon& node0 = cluster.daemons()[0];
  const client::LocalDaemon& node2 = cluster.daemons()[2];
  const std::optional<transport::HandshakeKey> key = FetchDataKey(node0, node2);
  ASSERT_TRUE(key.has_value());
  FileDescriptor fd = ConnectTo(node0.data_address);
  absl::StatusOr<std::optional<transport::tcp::SealedStream>> sealed = transport::tcp::Introduce(
      fd.get(), node2.data_address, node0.data_address, *key,
      /*seal=*/false, absl::Now() + absl::Seconds(10), [] { return false; });
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  EXPECT_TRUE(sealed->has_value()) << "node-0 did not seal the connection";
  std::vector<std::byte> frame(transport::kFrameHeaderBytes + 64);
  transport::EncodeFrameHeader(
      transport::FrameHeader{transport::FrameType::kData, transport::Tag{.seq = 1}, 64},
      std::span<std::byte, transport::kFrameHeaderBytes>(frame.data(),
                                                         transport::kFrameHeaderBytes));
  ASSERT_EQ(write(fd.get(), frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  EXPECT_TRUE(ClosedByPeer(fd.get()));
}

// The text of `daemon`'s log file.
std::string LogOf(const client::LocalDaemon& daemon) {
  std::ifstream log(daemon.log);
  return std::string((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
}

// Opens a data connection to `to` as `as` (the test holding `as`'s certificate) asking for no
// protection, and returns what the handshake agreed on: the ciphers if `to` made it sealed or
// authenticated.
std::optional<transport::tcp::SealedStream> ConnectAs(const client::LocalDaemon& to,
                                                      const client::LocalDaemon& as,
                                                      FileDescriptor& fd) {
  const std::optional<transport::HandshakeKey> key = FetchDataKey(to, as);
  if (!key.has_value()) return std::nullopt;
  fd = ConnectTo(to.data_address);
  absl::StatusOr<std::optional<transport::tcp::SealedStream>> stream = transport::tcp::Introduce(
      fd.get(), as.data_address, to.data_address, *key, transport::Protection::kNone,
      absl::Now() + absl::Seconds(10), [] { return false; });
  EXPECT_TRUE(stream.ok()) << stream.status();
  return stream.ok() ? *std::move(stream) : std::nullopt;
}

// With certificates and data_integrity left at its default (auto), every data connection is
// authenticated: two daemons' all-reduces of several records per message come out right with no
// seal failure or error on either link, each daemon says so, and a connection opened to node-0
// without asking is authenticated all the same (not sealed); a plain frame on it closes it. With
// data_integrity=off, the same connection stays plain.
TEST(DataPlaneSecurityTest, CertifiedDaemonsAuthenticateDataConnectionsByDefault) {
  {
    TestCluster cluster(2);
    ASSERT_TRUE(cluster.ok());
    AllReduceRounds(cluster, 3, /*ranks=*/2, /*elements=*/(size_t{1} << 20) + 5);  // 4 MiB
    for (const client::LocalDaemon& daemon : cluster.daemons()) {
      const std::string page = testing::HttpGet(daemon.metrics_address, "/metrics");
      for (const client::LocalDaemon& peer : cluster.daemons()) {
        if (peer.node_name == daemon.node_name) continue;
        const std::string labels =
            absl::StrCat("{local_node=\"", daemon.node_name, "\",peer_node=\"", peer.node_name,
                         "\",transport=\"tcp\"} ");
        EXPECT_NE(page.find("baton_link_seal_failures_total" + labels + "0\n"), std::string::npos)
            << daemon.node_name << " -> " << peer.node_name << "\n"
            << page;
        EXPECT_NE(page.find("baton_link_errors_total" + labels + "0\n"), std::string::npos)
            << daemon.node_name << " -> " << peer.node_name;
      }
      EXPECT_NE(LogOf(daemon).find("data connections are authenticated"), std::string::npos)
          << daemon.log;
    }
    FileDescriptor fd;
    std::optional<transport::tcp::SealedStream> stream =
        ConnectAs(cluster.daemons()[0], cluster.daemons()[1], fd);
    ASSERT_TRUE(stream.has_value()) << "node-0 did not authenticate the connection";
    EXPECT_FALSE(stream->seal.encrypts()) << "authenticated, not sealed";
    std::optional<transport::tcp::SealedStream> none;
    const std::vector<std::byte> plain = DataFrame(none, transport::Tag{.seq = 1}, 64);
    ASSERT_EQ(write(fd.get(), plain.data(), plain.size()), static_cast<ssize_t>(plain.size()));
    EXPECT_TRUE(ClosedByPeer(fd.get()));
  }
  {
    TestCluster cluster(2, {"--data-integrity=off"});
    ASSERT_TRUE(cluster.ok());
    AllReduceRounds(cluster, 1);
    EXPECT_NE(LogOf(cluster.daemons()[0]).find("data_integrity=off"), std::string::npos);
    FileDescriptor fd;
    EXPECT_FALSE(ConnectAs(cluster.daemons()[0], cluster.daemons()[1], fd).has_value());
  }
}

}  // namespace
}  // namespace baton
