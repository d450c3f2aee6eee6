#include "daemon/data_keys.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/hmac.h"
#include "common/secure_random.h"

namespace baton::daemon {

DataKeys::DataKeys() { SecureRandomBytes(secret_.data(), secret_.size()); }

void DataKeys::Bind(Fetch fetch, Holder holder) {
  absl::MutexLock lock(&mu_);
  fetch_ = std::move(fetch);
  holder_ = std::move(holder);
}

transport::HandshakeKey DataKeys::Derive(const std::string& address) const {
  const Hmac digest = HmacSha256(secret_, absl::StrCat("baton-data-key-v1|", address));
  transport::HandshakeKey key;
  std::copy(digest.begin(), digest.end(), key.begin());
  return key;
}

absl::StatusOr<transport::HandshakeKey> DataKeys::ToConnect(const std::string& peer, bool refresh,
                                                            absl::Time deadline) {
  Fetch fetch;
  {
    absl::MutexLock lock(&mu_);
    if (!refresh) {
      auto it = fetched_.find(peer);
      if (it != fetched_.end()) return it->second;
    }
    fetch = fetch_;
  }
  if (!fetch) return absl::FailedPreconditionError("the data keys are not bound to the node yet");
  absl::StatusOr<transport::HandshakeKey> key = fetch(peer, deadline);
  if (!key.ok()) return key.status();
  absl::MutexLock lock(&mu_);
  fetched_[peer] = *key;
  return *key;
}

absl::StatusOr<transport::HandshakeKey> DataKeys::ToAccept(const std::string& peer) {
  return Derive(peer);
}

absl::StatusOr<transport::HandshakeKey> DataKeys::Issue(const std::vector<std::string>& names,
                                                        const std::string& address) const {
  if (address.empty() || address.size() > transport::kMaxHelloAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a data address is 1 to ",
                                                   transport::kMaxHelloAddressBytes, " bytes, not ",
                                                   address.size()));
  }
  Holder holder;
  {
    absl::MutexLock lock(&mu_);
    holder = holder_;
  }
  const std::string known = holder ? holder(address) : "";
  if (!known.empty() && std::find(names.begin(), names.end(), known) == names.end()) {
    constexpr size_t kMaxQuoted = 64;
    return absl::PermissionDeniedError(absl::StrCat("data address ", address.substr(0, kMaxQuoted),
                                                    " belongs to node ", known,
                                                    ", not to the caller"));
  }
  return Derive(address);
}

}  // namespace baton::daemon
