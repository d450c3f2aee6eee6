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

  session::Request arena = RequestOf(session::RequestType::kOpenArena);
  arena.comm_tag = 0xabc;
  arena.rank = 3;
  decoded = Decode(arena, 0, true);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::get<SessionOpenArena>(*decoded).comm_tag, 0xabcu);
  EXPECT_EQ(std::get<SessionOpenArena>(*decoded).rank, 3);
  arena.rank = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(arena, 0, true).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(Decode(arena, 0, false).status())) << "needs a session";
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

namespace baton::daemon {
namespace {

session::Request DeviceRequest(uint32_t kind, std::vector<uint64_t> segments, uint64_t size) {
  session::Request request;
  request.type = static_cast<uint32_t>(session::RequestType::kRegisterDevice);
  request.device.share_kind = kind;
  request.device.base = 1 << 20;
  request.device.size = size;
  request.device.segment_count = static_cast<uint32_t>(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) request.device.segment_sizes[i] = segments[i];
  return request;
}

absl::StatusOr<SessionRequest> DecodeDevice(const session::Request& request, size_t fds) {
  return DecodeSessionRequest(
      std::span(reinterpret_cast<const std::byte*>(&request), sizeof(request)), fds, true);
}

TEST(SessionMessagesTest, DeviceRegistrationsAreCheckedWhole) {
  const uint32_t vmm = static_cast<uint32_t>(device::ShareKind::kVmm);
  const uint32_t legacy = static_cast<uint32_t>(device::ShareKind::kLegacyIpc);
  absl::StatusOr<SessionRequest> good = DecodeDevice(DeviceRequest(vmm, {4096, 8192}, 12288), 2);
  ASSERT_TRUE(good.ok()) << good.status();
  const auto& decoded = std::get<SessionRegisterDevice>(*good);
  EXPECT_EQ(decoded.memory.segment_sizes, (std::vector<uint64_t>{4096, 8192}));
  EXPECT_EQ(decoded.memory.base, uint64_t{1} << 20);
  // One descriptor per segment, segments that add up, a size, a known kind.
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeDevice(DeviceRequest(vmm, {4096, 8192}, 12288), 1).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeDevice(DeviceRequest(vmm, {4096, 8192}, 16384), 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeDevice(DeviceRequest(vmm, {4096, UINT64_MAX}, 4095), 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(DeviceRequest(vmm, {}, 4096), 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(DeviceRequest(vmm, {0}, 0), 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(DeviceRequest(7, {4096}, 4096), 1).status()));
  session::Request wraps = DeviceRequest(vmm, {4096}, 4096);
  wraps.device.base = UINT64_MAX - 100;
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(wraps, 1).status()));
  // A legacy handle carries no descriptor and no segments.
  EXPECT_TRUE(DecodeDevice(DeviceRequest(legacy, {}, 4096), 0).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(DeviceRequest(legacy, {}, 4096), 1).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeDevice(DeviceRequest(legacy, {4096}, 4096), 0).status()));
}

TEST(SessionMessagesTest, EventSetsAreCheckedWhole) {
  session::Request request;
  request.type = static_cast<uint32_t>(session::RequestType::kRegisterEvents);
  request.events.event_count = 4;
  EXPECT_TRUE(DecodeDevice(request, 0).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(request, 4).status()));  // with_fds is 0
  request.events.with_fds = 1;
  EXPECT_TRUE(DecodeDevice(request, 4).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(request, 3).status()));
  request.events.event_count = session::kMaxEvents + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(request, 0).status()));
  request.events.event_count = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeDevice(request, 0).status()));
}

}  // namespace
}  // namespace baton::daemon
