#include "daemon/comm_proof.h"

#include "absl/strings/str_cat.h"
#include "common/hmac.h"

namespace baton::daemon {

std::string AbortProof(const std::string& secret, uint64_t comm_tag, const AbortNotice& notice,
                       absl::string_view from_node) {
  const absl::string_view message = notice.reason.message();
  // Lengths before the variable fields, so that no two messages share a text.
  std::string text = absl::StrCat("baton-abort-v1|", absl::Hex(comm_tag), "|",
                                  static_cast<int>(notice.reason.code()), "|", message.size(), ":",
                                  message, "|", from_node.size(), ":", from_node);
  if (notice.from_operation.has_value()) {
    absl::StrAppend(&text, "|from-operation:", *notice.from_operation);
  }
  if (notice.departed.has_value()) {
    absl::StrAppend(&text, "|departed:", notice.departed->rank, ":", notice.departed->sent.size());
    for (const auto& [dst, messages] : notice.departed->sent) {
      absl::StrAppend(&text, "|", dst, "=", messages);
    }
  }
  return HmacHex(HmacSha256(std::as_bytes(std::span(secret.data(), secret.size())), text));
}

std::string ConnectionDataProof(const std::string& secret, uint64_t comm_tag,
                                absl::string_view from, absl::string_view to,
                                absl::string_view data) {
  // Lengths before the variable fields, so that no two messages share a text.
  const std::string text =
      absl::StrCat("baton-connection-data-v1|", absl::Hex(comm_tag), "|", from.size(), ":", from,
                   "|", to.size(), ":", to, "|", data.size(), ":", data);
  return HmacHex(HmacSha256(std::as_bytes(std::span(secret.data(), secret.size())), text));
}

}  // namespace baton::daemon
