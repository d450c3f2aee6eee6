#include "transport/tcp/tcp_transport.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport {

absl::StatusOr<std::unique_ptr<Endpoint>> NewTcpEndpoint(const TcpOptions& options) {
  BATON_ASSIGN_OR_RETURN(HostPort listen_address, SplitHostPort(options.listen_address));
  BATON_ASSIGN_OR_RETURN(Listener listener, ListenTcp(listen_address));
  FileDescriptor wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return BATON_ERRNO_STATUS("eventfd");
  const std::string& host =
      options.advertise_host.empty() ? listen_address.host : options.advertise_host;
  const std::string address = JoinHostPort(host, listener.port);
  if (options.receive_spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("receive_spin must not be negative");
  }
  if (options.reader_linger < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("reader_linger must not be negative");
  }
  if (options.streams_per_peer < 1 || options.streams_per_peer > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams_per_peer must be between 1 and 16, got ", options.streams_per_peer));
  }
  if (options.handshake_timeout <= absl::ZeroDuration() || options.max_pending_handshakes < 1 ||
      options.max_pending_handshakes_per_source < 1 || options.spare_connections_per_peer < 0) {
    return absl::InvalidArgumentError(
        "handshake_timeout, max_pending_handshakes and max_pending_handshakes_per_source must be "
        "positive, spare_connections_per_peer not negative");
  }
  auto endpoint =
      std::make_unique<tcp::TcpEndpoint>(std::move(listener), std::move(wake), address, options);
  endpoint->Start();
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

int TcpReceivesReading(const Endpoint& endpoint, const std::string& peer) {
  const auto* tcp = dynamic_cast<const tcp::TcpEndpoint*>(&endpoint);
  return tcp == nullptr ? 0 : tcp->ReceivesReading(peer);
}

namespace {

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(TcpOptions options) : options_(std::move(options)) {}

  std::string_view name() const override { return kTcpTransportName; }
  absl::StatusOr<std::unique_ptr<Endpoint>> Listen() override { return NewTcpEndpoint(options_); }
  bool CanReach(const PeerInfo& self, const PeerInfo& peer) const override {
    return peer.Find(kTcpTransportName) != nullptr;
  }

 private:
  const TcpOptions options_;
};

}  // namespace

std::unique_ptr<Transport> NewTcpTransport(const TcpOptions& options) {
  return std::make_unique<TcpTransport>(options);
}

}  // namespace baton::transport
