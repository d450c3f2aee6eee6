#include "transport/transport.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace baton::transport {

std::string TagToString(const Tag& tag) {
  return absl::StrCat("comm ", absl::Hex(tag.comm, absl::kZeroPad8), " op ", tag.seq, " step ",
                      tag.step, " part ", tag.part);
}

absl::Status CheckSendAll(const std::string& peer, std::span<const OutMessage> messages) {
  for (const OutMessage& message : messages) {
    if (message.tag.comm != messages.front().tag.comm) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the messages of one SendAll to peer ", peer, " belong to different communicators (",
          TagToString(messages.front().tag), "; ", TagToString(message.tag), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Endpoint::SendAll(const std::string& peer, std::span<const OutMessage> messages,
                               absl::Time deadline) {
  BATON_RETURN_IF_ERROR(CheckSendAll(peer, messages));
  for (const OutMessage& message : messages) {
    BATON_RETURN_IF_ERROR(Send(peer, message.tag, message.data, deadline));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> Endpoint::RoundTrip(const std::string& peer, absl::Time) {
  return absl::UnimplementedError(
      absl::StrCat("this transport does not time round trips (to peer ", peer, ")"));
}

}  // namespace baton::transport
