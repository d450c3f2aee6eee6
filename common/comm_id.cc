#include "common/comm_id.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::Status CheckCommIdText(std::string_view text) {
  if (text.size() > kMaxCommIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator id of ", text.size(), " bytes (at most ", kMaxCommIdBytes, ")"));
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x21 || byte > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrFormat("communicator id has byte 0x%02x at offset %d: an id is printable ASCII, "
                          "<root address>/<32 hex digits>",
                          byte, i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CanonicalCommSecret(std::string_view secret) {
  bool hex = secret.size() == kCommSecretDigits;
  std::string canonical(secret);
  for (size_t i = 0; hex && i < canonical.size(); ++i) {
    const int value = HexValue(canonical[i]);
    hex = value >= 0;
    if (hex) canonical[i] = "0123456789abcdef"[value];
  }
  if (!hex) return absl::InvalidArgumentError("a communicator secret is 32 hex digits");
  return canonical;
}

absl::StatusOr<uint64_t> CommTagOfSecret(std::string_view secret) {
  absl::StatusOr<std::string> canonical = CanonicalCommSecret(secret);
  if (!canonical.ok()) return canonical.status();
  if (*canonical != secret) {
    return absl::InvalidArgumentError("a communicator secret is 32 lower case hex digits");
  }
  uint64_t tag = 0;
  if (!absl::SimpleHexAtoi(std::string(secret.substr(0, 16)), &tag)) {
    return absl::InvalidArgumentError("a communicator secret is 32 hex digits");
  }
  return tag;
}

}  // namespace baton
