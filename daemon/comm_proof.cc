#include "daemon/comm_proof.h"

#include "absl/strings/str_cat.h"
#include "common/hmac.h"

namespace baton::daemon {

std::string AbortProof(const std::string& secret, uint64_t comm_tag, int code,
                       absl::string_view message, absl::string_view from_node,
                       std::optional<uint64_t> from_operation) {
  // Lengths before the variable fields, so that no two messages share a text.
  std::string text =
      absl::StrCat("baton-abort-v1|", absl::Hex(comm_tag), "|", code, "|", message.size(), ":",
                   message, "|", from_node.size(), ":", from_node);
  if (from_operation.has_value()) absl::StrAppend(&text, "|from-operation:", *from_operation);
  return HmacHex(HmacSha256(std::as_bytes(std::span(secret.data(), secret.size())), text));
}

}  // namespace baton::daemon
