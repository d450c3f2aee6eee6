// The session socket's decoder apart from any socket: what each request decodes to, and what is
// refused (with which code) in which state of the connection.

#include "daemon/session_messages.h"

#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/session_protocol.h"

namespace baton::daemon {
namespace {

session::Request RequestOf(session::RequestType type) {
  session::Request request;
  request.type = static_cast<uint32_t>(type);
  return request;
}

absl::StatusOr<SessionRequest> Decode(const session::Request& request, int fds, bool has_session) {
  return DecodeSessionRequest(
      std::span(reinterpret_cast<const std::byte*>(&request), sizeof(request)), fds, has_session);
}

TEST(SessionMessagesTest, DecodesEachRequest) {
  session::Request open = RequestOf(session::RequestType::kOpen);
  std::strcpy(open.client_name, "trainer");
  absl::StatusOr<SessionRequest> decoded = Decode(open, 0, false);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::get<SessionOpen>(*decoded).client_name, "trainer");

  session::Request registration = RequestOf(session::RequestType::kRegister);
  registration.size = 4096;
  decoded = Decode(registration, 1, true);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::get<SessionRegister>(*decoded).size, 4096u);
  EXPECT_TRUE(std::get<SessionRegister>(*decoded).has_memfd);
  // Without its memfd it still decodes: refusing it (and keeping the connection) is the
  // server's.
  decoded = Decode(registration, 0, true);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_FALSE(std::get<SessionRegister>(*decoded).has_memfd);

  session::Request release = RequestOf(session::RequestType::kRelease);
  release.buffer_id = 7;
  decoded = Decode(release, 0, true);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::get<SessionRelease>(*decoded).buffer_id, 7u);
}

TEST(SessionMessagesTest, ANameThatFillsItsFieldIsCut) {
  session::Request open = RequestOf(session::RequestType::kOpen);
  std::memset(open.client_name, 'x', sizeof(open.client_name));
  absl::StatusOr<SessionRequest> decoded = Decode(open, 0, false);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::get<SessionOpen>(*decoded).client_name,
            std::string(sizeof(open.client_name) - 1, 'x'));
}

TEST(SessionMessagesTest, RefusesWhatIsNotARequestOfThisVersion) {
  const session::Request open = RequestOf(session::RequestType::kOpen);
  const auto* bytes = reinterpret_cast<const std::byte*>(&open);
  for (size_t size : {size_t{0}, size_t{1}, sizeof(open) - 1}) {
    EXPECT_TRUE(
        absl::IsInvalidArgument(DecodeSessionRequest(std::span(bytes, size), 0, false).status()))
        << size << " bytes";
  }
  std::vector<std::byte> longer(bytes, bytes + sizeof(open));
  longer.push_back(std::byte{0});
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeSessionRequest(longer, 0, false).status()));
  session::Request wrong = open;
  wrong.magic = 1;
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(wrong, 0, false).status()));
  wrong = open;
  wrong.version = session::kVersion + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(wrong, 0, false).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(open, 2, false).status()));
}

TEST(SessionMessagesTest, TheConnectionsStateDecidesFirst) {
  // An open where a session exists, anything else where none does - an unknown type included,
  // as the server has always answered it.
  EXPECT_TRUE(
      absl::IsFailedPrecondition(Decode(RequestOf(session::RequestType::kOpen), 0, true).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      Decode(RequestOf(session::RequestType::kRelease), 0, false).status()));
  session::Request unknown;
  unknown.type = 99;
  EXPECT_TRUE(absl::IsFailedPrecondition(Decode(unknown, 0, false).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(unknown, 0, true).status()));
  unknown.type = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(unknown, 0, true).status()));
}

}  // namespace
}  // namespace baton::daemon
