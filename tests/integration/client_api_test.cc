// The daemon's client API spoken directly over gRPC, as a client in another language would:
// every malformed collective request fails with a clear InvalidArgument (a rank alone in its
// communicator keeps using it; the other ranks of a larger one fail at once).

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "baton/v1/baton.grpc.pb.h"
#include "collective/algorithm.h"
#include "collective/data_type.h"
#include "common/shared_memory.h"
#include "common/submission_channel.h"
#include "common/tls_certificates.h"
#include "daemon/comm_proof.h"
#include "daemon/rendezvous.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/test_cluster.h"
#include "tests/testing/peer_stub.h"
#include "tests/testing/raw_session.h"

namespace baton {
namespace {

using testing::TestCluster;

class ClientApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ok());
    stub_ = v1::Client::NewStub(grpc::CreateChannel("unix://" + cluster_.daemons()[0].socket,
                                                    grpc::InsecureChannelCredentials()));
    absl::StatusOr<std::unique_ptr<testing::RawSession>> raw =
        testing::RawSession::Connect(cluster_.daemons()[0].socket);
    ASSERT_TRUE(raw.ok()) << raw.status();
    raw_ = *std::move(raw);
    session_ = raw_->id();
    v1::CreateCommIdResponse id;
    ASSERT_TRUE(Call(&v1::Client::Stub::CreateCommId, IdRequest(), &id).ok());
    v1::JoinRequest join;
    join.set_session_id(session_);
    join.set_comm_id(id.comm_id());
    join.set_world_size(1);
    join.set_rank(0);
    join.set_timeout_ms(10000);
    v1::JoinResponse joined;
    ASSERT_TRUE(Call(&v1::Client::Stub::Join, join, &joined).ok());
    tag_ = joined.comm_tag();
    // A 4 KiB buffer shared with the daemon.
    memory_ = *SharedMemory::Create(4096, "api-test");
    absl::StatusOr<uint64_t> registered = raw_->Register(*memory_, 4096);
    ASSERT_TRUE(registered.ok()) << registered.status();
    buffer_ = *registered;
  }

  // A communicator id for this test's session.
  v1::CreateCommIdRequest IdRequest() const {
    v1::CreateCommIdRequest request;
    request.set_session_id(session_);
    return request;
  }

  template <typename Method, typename Request, typename Response>
  grpc::Status Call(Method method, const Request& request, Response* response) {
    return ((*stub_).*method)(raw_->Context().get(), request, response);
  }

  // A valid all-reduce of 16 float32 in place; tests break one field at a time.
  v1::CollectiveRequest Valid() const {
    v1::CollectiveRequest request;
    request.set_session_id(session_);
    request.set_comm_tag(tag_);
    request.set_rank(0);
    request.set_op(v1::COLLECTIVE_OP_ALL_REDUCE);
    request.set_data_type("float32");
    request.set_reduce_op("sum");
    request.set_count(16);
    request.mutable_send()->set_buffer_id(buffer_);
    request.mutable_recv()->set_buffer_id(buffer_);
    request.set_timeout_ms(10000);
    return request;
  }

  // Sends `request`, expects `code` with `text` in the message, then checks a valid call works.
  void ExpectRejected(const v1::CollectiveRequest& request, grpc::StatusCode code,
                      const std::string& text) {
    v1::CollectiveResponse response;
    grpc::Status status = Call(&v1::Client::Stub::Collective, request, &response);
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_NE(status.error_message().find(text), std::string::npos) << status.error_message();
    static_cast<float*>(memory_->data())[0] = 2.5f;
    grpc::Status valid = Call(&v1::Client::Stub::Collective, Valid(), &response);
    EXPECT_TRUE(valid.ok()) << "after '" << text << "': " << valid.error_message();
    EXPECT_EQ(static_cast<float*>(memory_->data())[0], 2.5f) << "a 1-rank sum keeps the value";
  }

  TestCluster cluster_{1};
  std::unique_ptr<v1::Client::Stub> stub_;
  std::unique_ptr<testing::RawSession> raw_;
  uint64_t session_ = 0;
  uint64_t tag_ = 0;
  uint64_t buffer_ = 0;
  std::unique_ptr<SharedMemory> memory_;
};

TEST_F(ClientApiTest, EveryMalformedRequestFailsAloneWithAClearError) {
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  v1::CollectiveRequest r = Valid();
  r.set_data_type("float33");
  ExpectRejected(r, kInvalid, "unknown data type 'float33'");
  r = Valid();
  r.set_reduce_op("median");
  ExpectRejected(r, kInvalid, "unknown reduce op 'median'");
  r = Valid();
  r.set_op(static_cast<v1::CollectiveOp>(42));
  ExpectRejected(r, kInvalid, "unknown collective");
  r = Valid();
  r.set_count(UINT64_MAX / 2);
  ExpectRejected(r, kInvalid, "overflows");
  r = Valid();
  r.set_count(2000);  // 8000 bytes in a 4096-byte buffer
  ExpectRejected(r, kInvalid, "outside buffer");
  r = Valid();
  r.mutable_recv()->set_offset(4090);
  ExpectRejected(r, kInvalid, "outside buffer");
  // Within the buffer but not on a whole element: every float32 would be misaligned (found by
  // proto_handlers_fuzz as a misaligned store in the reduction kernels).
  r = Valid();
  r.mutable_recv()->set_offset(2);
  ExpectRejected(r, kInvalid, "recv offset 2 is not a multiple of 4 bytes, the size of float32");
  r = Valid();
  r.mutable_send()->set_offset(1);
  ExpectRejected(r, kInvalid, "send offset 1 is not a multiple of 4 bytes");
  r = Valid();
  r.mutable_send()->set_buffer_id(buffer_ + 100);
  ExpectRejected(r, kInvalid, "is not registered");
  r = Valid();
  r.set_op(v1::COLLECTIVE_OP_BROADCAST);
  r.set_root(1);
  ExpectRejected(r, kInvalid, "root 1 is out of range");
  r = Valid();
  r.set_algorithm("butterfly");
  ExpectRejected(r, kInvalid, "unknown algorithm");
  r = Valid();
  r.set_op(v1::COLLECTIVE_OP_ALL_GATHER);
  r.set_algorithm("tree");
  ExpectRejected(r, kInvalid, "tree does not implement all_gather");
  r = Valid();
  r.set_rank(1);
  ExpectRejected(r, grpc::StatusCode::PERMISSION_DENIED, "not attached by this session");
  r = Valid();
  r.set_comm_tag(tag_ + 1);
  ExpectRejected(r, grpc::StatusCode::NOT_FOUND, "unknown communicator");
}

TEST_F(ClientApiTest, ChannelsServeOnlyTheSessionsOwnRanksAndRejectBadOperationsAlone) {
  std::unique_ptr<SharedMemory> page_memory =
      *SharedMemory::Create(channel::kChannelBytes, "api-test-channel");
  auto* page = new (page_memory->data()) channel::Layout;
  absl::StatusOr<uint64_t> page_buffer = raw_->Register(*page_memory, channel::kChannelBytes);
  ASSERT_TRUE(page_buffer.ok()) << page_buffer.status();
  v1::OpenChannelRequest open;
  open.set_session_id(session_);
  open.set_comm_tag(tag_);
  open.set_rank(0);
  open.set_buffer_id(*page_buffer);
  v1::OpenChannelResponse opened;
  // Not yet a channel: magic and version are unset.
  grpc::Status status = Call(&v1::Client::Stub::OpenChannel, open, &opened);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  page->magic = channel::kMagic;
  page->version = channel::kVersion;
  v1::OpenChannelRequest wrong = open;
  wrong.set_rank(1);
  EXPECT_EQ(Call(&v1::Client::Stub::OpenChannel, wrong, &opened).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  wrong = open;
  wrong.set_comm_tag(tag_ + 1);
  EXPECT_EQ(Call(&v1::Client::Stub::OpenChannel, wrong, &opened).error_code(),
            grpc::StatusCode::NOT_FOUND);
  wrong = open;
  wrong.set_buffer_id(*page_buffer + 100);  // not registered
  EXPECT_EQ(Call(&v1::Client::Stub::OpenChannel, wrong, &opened).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  status = Call(&v1::Client::Stub::OpenChannel, open, &opened);
  ASSERT_TRUE(status.ok()) << status.error_message();

  uint32_t submitted = 0;
  auto submit = [&](const channel::OpDescriptor& op) -> absl::StatusOr<std::string> {
    page->op = op;
    const uint32_t previous = submitted++;
    channel::Publish(page->submitted, submitted, page->daemon_sleeping);
    absl::Status waited =
        channel::WaitForChange(page->completed, previous, page->client_sleeping,
                               channel::kDefaultSpin, absl::Now() + absl::Seconds(20), nullptr);
    if (!waited.ok()) return waited;
    std::string algorithm;
    absl::Status result = channel::ReadResult(page->result, &algorithm);
    if (!result.ok()) return result;
    return algorithm;
  };
  channel::OpDescriptor valid;
  valid.kind = static_cast<uint32_t>(collective::Collective::kAllReduce);
  valid.data_type = static_cast<uint32_t>(collective::DataType::kFloat32);
  valid.reduce_op = static_cast<uint32_t>(collective::ReduceOp::kSum);
  valid.count = 16;
  valid.send_buffer = buffer_;
  valid.recv_buffer = buffer_;
  valid.timeout_ms = 10000;
  channel::OpDescriptor bad = valid;
  bad.kind = 42;
  EXPECT_TRUE(absl::IsInvalidArgument(submit(bad).status()));
  bad = valid;
  bad.count = 2000;  // 8000 bytes in a 4096-byte buffer
  absl::StatusOr<std::string> ran = submit(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(ran.status())) << ran.status();
  EXPECT_NE(ran.status().message().find("outside buffer"), std::string::npos) << ran.status();
  bad = valid;
  bad.recv_buffer = buffer_ + 100;
  EXPECT_TRUE(absl::IsInvalidArgument(submit(bad).status()));
  bad = valid;
  bad.send_offset = 6;
  ran = submit(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(ran.status())) << ran.status();
  EXPECT_NE(ran.status().message().find("not a multiple"), std::string::npos) << ran.status();
  static_cast<float*>(memory_->data())[0] = 2.5f;
  ran = submit(valid);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(*ran, "local");
  EXPECT_EQ(static_cast<float*>(memory_->data())[0], 2.5f);
  // The gRPC path serves the same rank alongside the channel.
  v1::CollectiveResponse response;
  EXPECT_TRUE(Call(&v1::Client::Stub::Collective, Valid(), &response).ok());
}

// A collective the daemon refuses (here: a range outside the rank's buffer) fails alone, and the
// other ranks, which would wait for that rank's part until their timeout (60 s here), fail at
// once with Aborted naming the rank and its error.
TEST_F(ClientApiTest, ACollectiveTheDaemonRefusesFailsTheOtherRanksAtOnce) {
  absl::StatusOr<std::unique_ptr<testing::RawSession>> other =
      testing::RawSession::Connect(cluster_.daemons()[0].socket);
  ASSERT_TRUE(other.ok()) << other.status();
  std::unique_ptr<SharedMemory> other_memory = *SharedMemory::Create(4096, "api-test-other");
  absl::StatusOr<uint64_t> other_buffer = (*other)->Register(*other_memory, 4096);
  ASSERT_TRUE(other_buffer.ok()) << other_buffer.status();
  v1::CreateCommIdResponse id;
  ASSERT_TRUE(Call(&v1::Client::Stub::CreateCommId, IdRequest(), &id).ok());
  struct Rank {
    testing::RawSession* session;
    uint64_t buffer;
    uint64_t tag = 0;
  };
  std::vector<Rank> ranks = {{raw_.get(), buffer_}, {other->get(), *other_buffer}};
  std::vector<std::thread> joins;
  for (int rank = 0; rank < 2; ++rank) {
    joins.emplace_back([&, rank] {
      v1::JoinRequest join;
      join.set_session_id(ranks[rank].session->id());
      join.set_comm_id(id.comm_id());
      join.set_world_size(2);
      join.set_rank(rank);
      join.set_timeout_ms(20000);
      v1::JoinResponse joined;
      grpc::Status status = stub_->Join(ranks[rank].session->Context().get(), join, &joined);
      ASSERT_TRUE(status.ok()) << status.error_message();
      ranks[rank].tag = joined.comm_tag();
    });
  }
  for (std::thread& join : joins) join.join();
  auto all_reduce = [&](int rank, uint64_t count) {
    v1::CollectiveRequest request;
    request.set_session_id(ranks[rank].session->id());
    request.set_comm_tag(ranks[rank].tag);
    request.set_rank(rank);
    request.set_op(v1::COLLECTIVE_OP_ALL_REDUCE);
    request.set_data_type("float32");
    request.set_reduce_op("sum");
    request.set_count(count);
    request.mutable_send()->set_buffer_id(ranks[rank].buffer);
    request.mutable_recv()->set_buffer_id(ranks[rank].buffer);
    request.set_timeout_ms(60000);
    auto context = ranks[rank].session->Context();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
    v1::CollectiveResponse response;
    return stub_->Collective(context.get(), request, &response);
  };
  grpc::Status waited;
  absl::Duration took;
  std::thread waiting([&] {
    const absl::Time start = absl::Now();
    waited = all_reduce(0, 16);
    took = absl::Now() - start;
  });
  const grpc::Status refused = all_reduce(1, 2000);  // 8000 bytes in a 4096-byte buffer
  waiting.join();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.error_message();
  EXPECT_NE(refused.error_message().find("outside buffer"), std::string::npos)
      << refused.error_message();
  EXPECT_EQ(waited.error_code(), grpc::StatusCode::ABORTED) << waited.error_message();
  for (const char* text : {"rank 1", "refused", "outside buffer"}) {
    EXPECT_NE(waited.error_message().find(text), std::string::npos) << waited.error_message();
  }
  EXPECT_LT(took, absl::Seconds(20)) << "at once, not at its 60 s timeout";
}

// Another process on the node that knows (or guesses) this session's id cannot use it: every
// call naming a session needs that session's token, which only the process that opened it has.
TEST_F(ClientApiTest, ASessionIsReachedOnlyWithItsToken) {
  absl::StatusOr<std::unique_ptr<testing::RawSession>> other =
      testing::RawSession::Connect(cluster_.daemons()[0].socket);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)->id(), session_);
  EXPECT_NE((*other)->token(), raw_->token());
  EXPECT_EQ((*other)->token().size(), 32u);
  auto expect_refused = [&](grpc::ClientContext* context) {
    v1::CollectiveResponse response;
    grpc::Status status = stub_->Collective(context, Valid(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  };
  // Another session's token, a wrong one, and none.
  expect_refused((*other)->Context().get());
  grpc::ClientContext wrong;
  wrong.AddMetadata(session::kTokenMetadata, std::string(32, '0'));
  expect_refused(&wrong);
  grpc::ClientContext none;
  expect_refused(&none);
  v1::DestroyRequest destroy;
  destroy.set_session_id(session_);
  destroy.set_comm_tag(tag_);
  v1::DestroyResponse destroyed;
  EXPECT_EQ(stub_->Destroy((*other)->Context().get(), destroy, &destroyed).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::AbortCommunicatorRequest abort;
  abort.set_session_id(session_);
  abort.set_comm_tag(tag_);
  v1::AbortCommunicatorResponse aborted;
  EXPECT_EQ(stub_->AbortCommunicator((*other)->Context().get(), abort, &aborted).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // The session was untouched: its own calls still work.
  v1::CollectiveResponse response;
  EXPECT_TRUE(Call(&v1::Client::Stub::Collective, Valid(), &response).ok());
  // Closing the session socket ends the session: its token opens nothing any more.
  const std::string token = raw_->token();
  raw_.reset();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  grpc::Status status;
  do {
    grpc::ClientContext context;
    context.AddMetadata(session::kTokenMetadata, token);
    status = stub_->Collective(&context, Valid(), &response);
  } while (status.ok() && absl::Now() < deadline);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
}

// The peer API's Abort needs more than the communicator's tag (which GetStatus, logs and frames
// show): the sender must be a daemon of the plan and prove it holds the whole secret. A forged
// abort changes nothing; a probe cannot make the daemon answer with more than it was sent; a join
// too large or an id too long is refused, with a short error.
TEST_F(ClientApiTest, ForgedAbortsAmplifyingProbesAndOversizedJoinsChangeNothing) {
  // A daemon certified as itself: the certificate check passes, the proof must not.
  auto peer = testing::PeerStub(cluster_.daemons()[0], testing::IdentityOf(cluster_.daemons()[0]));
  auto abort = [&](const std::string& from_node, const std::string& proof) {
    v1::AbortRequest request;
    request.set_comm_tag(tag_);
    request.set_code(static_cast<int>(grpc::StatusCode::ABORTED));
    request.set_message("forged");
    request.set_from_node(from_node);
    request.set_proof(proof);
    v1::AbortResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return peer->Abort(&context, request, &response);
  };
  for (const auto& [from, proof] :
       {std::pair<std::string, std::string>{cluster_.daemons()[0].node_name, ""},
        {cluster_.daemons()[0].node_name, std::string(64, 'a')},
        {"some-other-node", std::string(64, 'b')}}) {
    grpc::Status status = abort(from, proof);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  }
  v1::CollectiveResponse response;
  grpc::Status ran = Call(&v1::Client::Stub::Collective, Valid(), &response);
  EXPECT_TRUE(ran.ok()) << "the communicator was aborted: " << ran.error_message();

  // A probe answers with no more bytes than it was sent.
  auto probe = [&](size_t payload, int reply) {
    v1::ProbeRequest request;
    request.mutable_payload()->resize(payload);
    request.set_reply_bytes(reply);
    v1::ProbeResponse answer;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status status = peer->Probe(&context, request, &answer);
    return status.ok() ? static_cast<int>(answer.payload().size()) : -1;
  };
  EXPECT_EQ(probe(4, 1 << 20), -1);
  EXPECT_EQ(probe(1024, 1024), 1024);
  EXPECT_EQ(probe(4, 0), 0);

  // A join of 2,000,000 ranks and a comm id of 8 KiB are refused at once, briefly.
  v1::CreateCommIdResponse id;
  ASSERT_TRUE(Call(&v1::Client::Stub::CreateCommId, IdRequest(), &id).ok());
  v1::JoinRequest join;
  join.set_session_id(session_);
  join.set_comm_id(id.comm_id());
  join.set_world_size(2000000);
  join.set_rank(0);
  join.set_timeout_ms(1000);
  v1::JoinResponse joined;
  const absl::Time start = absl::Now();
  grpc::Status status = Call(&v1::Client::Stub::Join, join, &joined);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("max_world_size"), std::string::npos);
  join.set_world_size(1);
  join.set_comm_id(id.comm_id() + std::string(8192, 'f'));
  status = Call(&v1::Client::Stub::Join, join, &joined);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_LT(status.error_message().size(), 200u) << status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The session survived both.
  EXPECT_TRUE(Call(&v1::Client::Stub::Collective, Valid(), &response).ok());
}

// An abort notice may reach a daemon before its ranks' joins have been answered (the aborting
// rank's daemon got its plan first). It is kept, and applied once the communicator forms there,
// if its proof holds: the ranks on that daemon then fail at once instead of waiting out their
// deadline.
TEST(EarlyAbortTest, AnAbortThatArrivesBeforeTheCommunicatorFormsIsApplied) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok());
  std::vector<std::unique_ptr<v1::Client::Stub>> stubs;
  std::vector<std::unique_ptr<testing::RawSession>> raws;
  for (int d = 0; d < 2; ++d) {
    stubs.push_back(v1::Client::NewStub(grpc::CreateChannel("unix://" + cluster.daemons()[d].socket,
                                                            grpc::InsecureChannelCredentials())));
    absl::StatusOr<std::unique_ptr<testing::RawSession>> raw =
        testing::RawSession::Connect(cluster.daemons()[d].socket);
    ASSERT_TRUE(raw.ok()) << raw.status();
    raws.push_back(*std::move(raw));
  }
  v1::CreateCommIdRequest create;
  create.set_session_id(raws[0]->id());
  v1::CreateCommIdResponse id;
  ASSERT_TRUE(stubs[0]->CreateCommId(raws[0]->Context().get(), create, &id).ok());
  const std::string secret = id.comm_id().substr(id.comm_id().rfind('/') + 1);
  absl::StatusOr<uint64_t> tag = daemon::Rendezvous::TagOfSecret(secret);
  ASSERT_TRUE(tag.ok());
  // Daemon 0's notice to daemon 1, before anyone has joined.
  const std::string from = cluster.daemons()[0].node_name;
  const std::string reason = "rank 0 gave up early";
  auto peer = testing::PeerStub(cluster.daemons()[1], testing::IdentityOf(cluster.daemons()[0]));
  v1::AbortRequest abort;
  abort.set_comm_tag(*tag);
  abort.set_code(static_cast<int>(absl::StatusCode::kAborted));
  abort.set_message(reason);
  abort.set_from_node(from);
  abort.set_proof(
      daemon::AbortProof(secret, *tag, daemon::AbortNotice{absl::AbortedError(reason)}, from));
  v1::AbortResponse aborted;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(peer->Abort(&context, abort, &aborted).ok());
  }
  // A forged one for the same communicator is kept too, and discarded when it forms.
  abort.set_message("forged");
  {
    grpc::ClientContext context;
    ASSERT_TRUE(peer->Abort(&context, abort, &aborted).ok());
  }
  std::vector<uint64_t> tags(2);
  std::vector<std::thread> joins;
  for (int r = 0; r < 2; ++r) {
    joins.emplace_back([&, r] {
      v1::JoinRequest join;
      join.set_session_id(raws[r]->id());
      join.set_comm_id(id.comm_id());
      join.set_world_size(2);
      join.set_rank(r);
      join.set_timeout_ms(10000);
      v1::JoinResponse joined;
      grpc::Status status = stubs[r]->Join(raws[r]->Context().get(), join, &joined);
      EXPECT_TRUE(status.ok()) << status.error_message();
      tags[r] = joined.comm_tag();
    });
  }
  for (std::thread& t : joins) t.join();
  EXPECT_EQ(tags[1], *tag);
  // Rank 1's first collective fails at once with the early reason (not the forged one).
  std::unique_ptr<SharedMemory> memory = *SharedMemory::Create(4096, "early-abort");
  absl::StatusOr<uint64_t> buffer = raws[1]->Register(*memory, 4096);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  v1::CollectiveRequest request;
  request.set_session_id(raws[1]->id());
  request.set_comm_tag(*tag);
  request.set_rank(1);
  request.set_op(v1::COLLECTIVE_OP_ALL_REDUCE);
  request.set_data_type("float32");
  request.set_reduce_op("sum");
  request.set_count(4);
  request.mutable_send()->set_buffer_id(*buffer);
  request.mutable_recv()->set_buffer_id(*buffer);
  request.set_timeout_ms(20000);
  v1::CollectiveResponse response;
  const absl::Time start = absl::Now();
  grpc::Status status = stubs[1]->Collective(raws[1]->Context().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED) << status.error_message();
  EXPECT_NE(status.error_message().find(reason), std::string::npos) << status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A root daemon that answers every forwarded join with the plan a test gives it.
class PlanningRoot final : public v1::Peer::Service {
 public:
  void Answer(v1::Plan plan) {
    absl::MutexLock lock(&mu_);
    plan_ = std::move(plan);
  }
  grpc::Status JoinRank(grpc::ServerContext*, const v1::JoinRankRequest*,
                        v1::JoinRankResponse* response) override {
    absl::MutexLock lock(&mu_);
    *response->mutable_plan() = plan_;
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  v1::Plan plan_ ABSL_GUARDED_BY(mu_);
};

// A daemon whose ranks join through another daemon, the communicator's root, as that root
// answers: a stand-in root (PlanningRoot) for a real daemon without TLS.
class RootPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ok());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&root_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Client::NewStub(grpc::CreateChannel("unix://" + cluster_.daemons()[0].socket,
                                                    grpc::InsecureChannelCredentials()));
    absl::StatusOr<std::unique_ptr<testing::RawSession>> raw =
        testing::RawSession::Connect(cluster_.daemons()[0].socket);
    ASSERT_TRUE(raw.ok()) << raw.status();
    raw_ = *std::move(raw);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // Ranks 0 and 2 on this daemon and 1 on another, as a root would plan a join of three.
  v1::Plan Valid() const {
    v1::Plan plan;
    plan.set_comm_tag(0x600d);
    plan.set_world_size(3);
    v1::PlanDaemon* here = plan.add_daemons();
    here->mutable_member()->set_node_name(cluster_.daemons()[0].node_name);
    here->mutable_member()->set_peer_address(cluster_.daemons()[0].peer_address);
    here->mutable_member()->set_data_address(cluster_.daemons()[0].data_address);
    here->add_ranks(0);
    here->add_ranks(2);
    v1::PlanDaemon* there = plan.add_daemons();
    there->mutable_member()->set_node_name("node-x");
    there->mutable_member()->set_peer_address(absl::StrCat("127.0.0.1:", port_));
    there->mutable_member()->set_data_address("127.0.0.1:1");
    there->add_ranks(1);
    return plan;
  }

  // Rank `rank` of a communicator of three whose id has `secret`, joined by `session` and
  // answered with `plan`.
  grpc::Status Join(const v1::Plan& plan, const std::string& secret, int rank,
                    const testing::RawSession& session) {
    root_.Answer(plan);
    v1::JoinRequest request;
    request.set_session_id(session.id());
    request.set_comm_id(absl::StrCat("127.0.0.1:", port_, "/", secret));
    request.set_world_size(3);
    request.set_rank(rank);
    request.set_timeout_ms(5000);
    v1::JoinResponse response;
    return stub_->Join(session.Context().get(), request, &response);
  }

  TestCluster cluster_{1, {}, /*tls=*/false};
  PlanningRoot root_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Client::Stub> stub_;
  std::unique_ptr<testing::RawSession> raw_;
  const std::string secret_ = std::string(32, 'a');
};

// A plan that does not fit the join (found by proto_handlers_fuzz: a plan of 273,719,954 ranks
// for a join of 2 had the daemon allocate vectors of that many entries, gigabytes, for the
// communicator) fails that join with DataLoss, and the daemon goes on; a plan that fits forms
// the communicator.
TEST_F(RootPlanTest, APlanThatDoesNotFitTheJoinFailsItAlone) {
  auto expect_refused = [&](const v1::Plan& plan, const std::string& text) {
    const absl::Time start = absl::Now();
    grpc::Status status = Join(plan, secret_, 0, *raw_);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS) << status.error_message();
    EXPECT_NE(status.error_message().find(text), std::string::npos) << status.error_message();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  };
  v1::Plan plan = Valid();
  plan.set_world_size(1 << 30);
  expect_refused(plan, "a plan of world size 1073741824 for a join of world size 3");
  plan = Valid();
  plan.mutable_daemons(1)->set_ranks(0, 0);
  expect_refused(plan, "rank 0 on two daemons");
  plan = Valid();
  plan.mutable_daemons()->RemoveLast();
  expect_refused(plan, "places 2 of its 3 ranks");
  grpc::Status status = Join(Valid(), secret_, 0, *raw_);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// The root chooses a plan's tag, and a tag is only the first half of a secret: a plan that
// names the tag of a communicator this daemon holds reaches it only with that communicator's
// id. Otherwise another session, joining through a root that answers so, would take a local
// rank of it that has not attached yet.
TEST_F(RootPlanTest, AnotherCommunicatorsTagDoesNotReachIt) {
  ASSERT_TRUE(Join(Valid(), secret_, 0, *raw_).ok());
  absl::StatusOr<std::unique_ptr<testing::RawSession>> other =
      testing::RawSession::Connect(cluster_.daemons()[0].socket);
  ASSERT_TRUE(other.ok()) << other.status();
  grpc::Status status = Join(Valid(), std::string(32, 'b'), 2, **other);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_NE(status.error_message().find("under another id"), std::string::npos)
      << status.error_message();
  // Rank 2 is still free for the session that has the communicator's id.
  status = Join(Valid(), secret_, 2, *raw_);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(ClientApiTest, RegisteringMemoryThatCouldShrinkOrIsTooSmallIsRejected) {
  // Unsealed: its owner could truncate it under the daemon's mapping.
  const int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 4096), 0);
  session::Request request;
  request.type = static_cast<uint32_t>(session::RequestType::kRegister);
  request.size = 4096;
  absl::StatusOr<session::Reply> reply = raw_->Exchange(request, unsealed);
  close(unsealed);
  EXPECT_TRUE(absl::IsInvalidArgument(reply.status())) << reply.status();
  EXPECT_NE(reply.status().message().find("F_SEAL_SHRINK"), std::string::npos);
  // Sealed but smaller than claimed; no memory at all.
  EXPECT_TRUE(absl::IsInvalidArgument(raw_->Register(*memory_, 8192).status()));
  reply = raw_->Exchange(request);
  EXPECT_TRUE(absl::IsInvalidArgument(reply.status())) << reply.status();
  // The session goes on.
  EXPECT_TRUE(raw_->Register(*memory_, 4096).ok());
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(TopologyApiTest, ARecordedTopologyIsServedInsteadOfDiscovery) {
  const std::string file =
      std::string(BATON_TOPOLOGY_FIXTURES) + "/nccl_aws-p4d-24xl_8xA100_4xEFA.xml";
  testing::TestCluster cluster(1, {"--topology-file=" + file});
  ASSERT_TRUE(cluster.ok());
  auto stub = v1::Client::NewStub(grpc::CreateChannel("unix://" + cluster.daemons()[0].socket,
                                                      grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::Topology topology;
  ASSERT_TRUE(stub->GetTopology(&context, v1::GetTopologyRequest(), &topology).ok());
  EXPECT_EQ(topology.source(), "file:" + file);
  EXPECT_EQ(topology.node_name(), "node-0");
  // The p4d: 8 GPUs, 4 NICs; GPU0 and GPU1 share a PCIe switch, GPU0 and GPU4 sit on different
  // sockets.
  const std::string& matrix = topology.path_matrix();
  EXPECT_NE(matrix.find("GPU7"), std::string::npos) << matrix;
  EXPECT_NE(matrix.find("NIC3"), std::string::npos) << matrix;
  EXPECT_EQ(matrix.find("GPU8"), std::string::npos) << matrix;
  EXPECT_NE(matrix.find("GPU0  X     PIX   PHB   PHB   SYS"), std::string::npos) << matrix;
  EXPECT_EQ(topology.graph_json().front(), '{');
}

TEST(TopologyApiTest, AnUnreadableTopologyFileStopsTheDaemonWithAClearError) {
  client::LocalClusterOptions options;
  char dir[] = "/tmp/baton-topo-XXXXXX";
  options.dir = mkdtemp(dir);
  options.nodes = 1;
  options.batond = BATOND_PATH;
  options.extra_args = {"--topology-file=/nonexistent/topology.xml"};
  absl::StatusOr<std::vector<client::LocalDaemon>> daemons = client::StartLocalCluster(options);
  ASSERT_FALSE(daemons.ok());
  EXPECT_NE(daemons.status().message().find("cannot read topology file /nonexistent"),
            std::string::npos)
      << daemons.status();
  std::error_code error;
  std::filesystem::remove_all(options.dir, error);
}

// The peer API runs mutual TLS: a caller without a certificate of the cluster's CA gets no
// answer at all, and a certified daemon may speak only as itself.
TEST(PeerTlsTest, OnlyCertifiedDaemonsReachThePeerApiAndOnlyAsThemselves) {
  TestCluster cluster(3);
  ASSERT_TRUE(cluster.ok());
  const client::LocalDaemon& target = cluster.daemons()[0];
  auto probe = [&](v1::Peer::Stub& peer) {
    v1::ProbeRequest request;
    request.mutable_payload()->resize(16);
    request.set_reply_bytes(16);
    v1::ProbeResponse answer;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return peer.Probe(&context, request, &answer);
  };
  const testing::PeerIdentity own = testing::IdentityOf(cluster.daemons()[2]);
  absl::StatusOr<DevCertificateAuthority> intruder_ca = DevCertificateAuthority::Create("intruder");
  ASSERT_TRUE(intruder_ca.ok()) << intruder_ca.status();
  absl::StatusOr<KeyAndCertificate> intruder = intruder_ca->Issue("node-1");
  ASSERT_TRUE(intruder.ok()) << intruder.status();
  // The intruder trusts the cluster's CA (it only wants to be believed), so the handshake fails
  // on the daemon's side.
  const std::vector<std::pair<std::string, testing::PeerIdentity>> refused = {
      {"no TLS", {}},
      {"TLS without a client certificate", {"", "", own.ca_pem}},
      {"a certificate of another CA", {intruder->key_pem, intruder->certificate_pem, own.ca_pem}},
  };
  for (const auto& [what, identity] : refused) {
    grpc::Status status = probe(*testing::PeerStub(target, identity));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << what << ": " << status.error_message();
  }

  auto certified = testing::PeerStub(target, own);
  grpc::Status status = probe(*certified);
  ASSERT_TRUE(status.ok()) << status.error_message();
  // node-2 claiming to be node-1, in an abort and in a join.
  v1::AbortRequest abort;
  abort.set_comm_tag(1);
  abort.set_code(static_cast<int>(grpc::StatusCode::ABORTED));
  abort.set_from_node("node-1");
  v1::AbortResponse aborted;
  {
    grpc::ClientContext context;
    status = certified->Abort(&context, abort, &aborted);
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_NE(status.error_message().find("certificate is for node-2"), std::string::npos)
      << status.error_message();
  v1::JoinRankRequest join;
  join.set_secret(std::string(32, 'a'));
  join.set_world_size(2);
  join.set_rank(1);
  join.mutable_member()->set_node_name("node-1");
  join.set_timeout_ms(1000);
  v1::JoinRankResponse joined;
  {
    grpc::ClientContext context;
    status = certified->JoinRank(&context, join, &joined);
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();

  // The daemons themselves still form communicators over TLS.
  auto daemon_stub = [&](int d) {
    return v1::Client::NewStub(grpc::CreateChannel("unix://" + cluster.daemons()[d].socket,
                                                   grpc::InsecureChannelCredentials()));
  };
  auto root = daemon_stub(0);
  absl::StatusOr<std::unique_ptr<testing::RawSession>> first =
      testing::RawSession::Connect(cluster.daemons()[0].socket);
  ASSERT_TRUE(first.ok()) << first.status();
  v1::CreateCommIdRequest create;
  create.set_session_id((*first)->id());
  v1::CreateCommIdResponse id;
  ASSERT_TRUE(root->CreateCommId((*first)->Context().get(), create, &id).ok());
  std::vector<std::thread> joins;
  std::vector<grpc::Status> results(3);
  std::vector<std::unique_ptr<testing::RawSession>> sessions;
  for (int d = 0; d < 3; ++d) {
    absl::StatusOr<std::unique_ptr<testing::RawSession>> raw =
        testing::RawSession::Connect(cluster.daemons()[d].socket);
    ASSERT_TRUE(raw.ok()) << raw.status();
    sessions.push_back(*std::move(raw));
  }
  for (int d = 0; d < 3; ++d) {
    joins.emplace_back([&, d] {
      v1::JoinRequest request;
      request.set_session_id(sessions[d]->id());
      request.set_comm_id(id.comm_id());
      request.set_world_size(3);
      request.set_rank(d);
      request.set_timeout_ms(20000);
      v1::JoinResponse response;
      results[d] = daemon_stub(d)->Join(sessions[d]->Context().get(), request, &response);
    });
  }
  for (std::thread& t : joins) t.join();
  for (int d = 0; d < 3; ++d) {
    EXPECT_TRUE(results[d].ok()) << d << ": " << results[d].error_message();
  }

  // Data-connection keys go only to the daemon that holds the address, by the plans node-0 knows.
  auto data_key = [&](const std::string& address) {
    v1::DataKeyRequest request;
    request.set_address(address);
    v1::DataKeyResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status status = certified->DataKey(&context, request, &response);
    return std::pair(status, response.key().size());
  };
  auto [mine, mine_bytes] = data_key(cluster.daemons()[2].data_address);
  EXPECT_TRUE(mine.ok()) << mine.error_message();
  EXPECT_EQ(mine_bytes, 32u);
  auto [other, other_bytes] = data_key(cluster.daemons()[1].data_address);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED) << other.error_message();
  EXPECT_EQ(other_bytes, 0u);
  EXPECT_EQ(data_key(std::string(2000, 'x')).first.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// Without certificates a daemon still serves (development), and says so where an SRE looks.
TEST(PeerTlsTest, ADaemonWithoutCertificatesSaysItIsInsecure) {
  TestCluster cluster(1, {}, /*tls=*/false);
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(testing::HttpGet(cluster.daemons()[0].metrics_address, "/readyz"),
            "200\nready insecure\n");
  EXPECT_NE(testing::ReadText(cluster.daemons()[0].log).find("unauthenticated"), std::string::npos);
}

// A certificate that does not name the daemon, or half a TLS configuration, stops it at start
// with an error saying what is wrong (instead of failed handshakes later).
TEST(PeerTlsTest, AMisconfiguredCertificateStopsTheDaemonWithAClearError) {
  for (const auto& [flag, expected] :
       {std::pair<std::string, std::string>{"--node-name=elsewhere",
                                            "this daemon's node name is elsewhere"},
        {"--tls-ca=", "tls_cert, tls_key and tls_ca go together"},
        {"--tls-key=/nonexistent/key.pem", "tls_key: cannot read /nonexistent/key.pem"}}) {
    client::LocalClusterOptions options;
    char dir[] = "/tmp/baton-tls-XXXXXX";
    options.dir = mkdtemp(dir);
    options.nodes = 1;
    options.batond = BATOND_PATH;
    options.extra_args = {flag};
    absl::StatusOr<std::vector<client::LocalDaemon>> daemons = client::StartLocalCluster(options);
    ASSERT_FALSE(daemons.ok()) << flag;
    EXPECT_NE(daemons.status().message().find(expected), std::string::npos) << daemons.status();
    std::error_code error;
    std::filesystem::remove_all(options.dir, error);
  }
}

}  // namespace
}  // namespace baton
