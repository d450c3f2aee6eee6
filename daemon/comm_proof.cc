#include "daemon/comm_proof.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton::daemon {

std::string AbortProof(const std::string& secret, uint64_t comm_tag, int code,
                       absl::string_view message, absl::string_view from_node) {
  // Lengths before the variable fields, so that no two messages share a text.
  const std::string text =
      absl::StrCat("baton-abort-v1|", absl::Hex(comm_tag), "|", code, "|", message.size(), ":",
                   message, "|", from_node.size(), ":", from_node);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest, &length);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) absl::StrAppendFormat(&hex, "%02x", digest[i]);
  return hex;
}

}  // namespace baton::daemon
