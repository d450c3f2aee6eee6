#pragma once

// The keys of this daemon's data connections (transport/auth/handshake.h), handed out over mutual
// TLS. This daemon derives the key a peer must prove from a secret of its own and the peer's data
// address, and gives it (DataKey RPC) only to the daemon certified as the node that holds that
// address; to connect to a peer it fetches the key that peer issued, once, and again if the peer
// seems to have restarted. So a data connection is believed to come from an address only if the
// daemon certified for it opened it, and a daemon knows it reached the one it asked.

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "transport/auth/handshake.h"

namespace baton::daemon {

class DataKeys final : public transport::HandshakeKeys {
 public:
  // Fetches the key the daemon whose data endpoint is `data_address` issued to this one.
  using Fetch = std::function<absl::StatusOr<transport::HandshakeKey>(
      const std::string& data_address, absl::Time deadline)>;
  // The node that holds `data_address` by this daemon's plans and probes; empty if none known.
  using Holder = std::function<std::string(const std::string& data_address)>;

  DataKeys();  // a fresh random secret

  // Sets where keys come from and who holds which address; before the first connection.
  void Bind(Fetch fetch, Holder holder) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<transport::HandshakeKey> ToConnect(const std::string& peer, bool refresh,
                                                    absl::Time deadline) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<transport::HandshakeKey> ToAccept(const std::string& peer) override;

  // For the DataKey RPC: the key the daemon certified with `names` proves when it connects from
  // `address`. PermissionDenied when this daemon knows `address` as another node's;
  // InvalidArgument for an empty or overlong address.
  absl::StatusOr<transport::HandshakeKey> Issue(const std::vector<std::string>& names,
                                                const std::string& address) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  transport::HandshakeKey Derive(const std::string& address) const;

  transport::HandshakeKey secret_;
  mutable absl::Mutex mu_;
  Fetch fetch_ ABSL_GUARDED_BY(mu_);
  Holder holder_ ABSL_GUARDED_BY(mu_);
  // Keys peers issued to this daemon, by their data address.
  absl::flat_hash_map<std::string, transport::HandshakeKey> fetched_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::daemon
