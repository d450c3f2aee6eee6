#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {

// A receive posted on the TCP endpoint, read by the thread that waits for it (ReadForReceive),
// which is told through its eventfd when the message arrives over another connection instead.
class TcpEndpoint::Recv final : public PostedRecv {
 public:
  Recv(TcpEndpoint* endpoint, std::string peer, absl::Time deadline)
      : endpoint_(endpoint), peer_(std::move(peer)), deadline_(deadline) {}

  absl::Status Wait() override {
    if (!inner_->Test()) endpoint_->ReadForReceive(*this, /*briefly=*/false);
    return inner_->Wait();
  }
  bool Test() override { return inner_->Test(); }
  bool WaitBriefly() override {
    if (!inner_->Test()) endpoint_->ReadForReceive(*this, /*briefly=*/true);
    return inner_->Test();
  }

 private:
  friend class TcpEndpoint;
  // Runs in the delivering thread once the message is in place.
  void Arrived() {
    arrived_.store(true, std::memory_order_release);
    const int event = event_.load(std::memory_order_acquire);
    if (event >= 0 && event != ProgressEngine::ThreadEvent()) ProgressEngine::Signal(event);
  }

  TcpEndpoint* const endpoint_;
  const std::string peer_;
  const absl::Time deadline_;
  std::atomic<int> event_{-1};        // the eventfd of the thread reading for this receive
  std::atomic<bool> arrived_{false};  // the message is in place (set before it completes)
  // The matcher's. Declared last, so destroyed first: its destructor may wait for a writer whose
  // arrival callback still uses event_.
  std::unique_ptr<PostedRecv> inner_;
};

std::unique_ptr<PostedRecv> TcpEndpoint::PostRecv(const std::string& peer, const Tag& tag,
                                                  ByteSpan data, absl::Time deadline,
                                                  ArrivalCallback on_arrival) {
  return PostWith(peer, deadline, std::move(on_arrival), [&](ArrivalCallback arrived) {
    return matcher_.Post(peer, tag, data, deadline, std::move(arrived));
  });
}

std::unique_ptr<PostedRecv> TcpEndpoint::PostConsume(const std::string& peer, const Tag& tag,
                                                     size_t length, absl::Time deadline,
                                                     PieceConsumer consume) {
  return PostWith(peer, deadline, nullptr, [&](ArrivalCallback arrived) {
    return matcher_.PostConsume(peer, tag, length, deadline, std::move(consume),
                                std::move(arrived));
  });
}

std::unique_ptr<PostedRecv> TcpEndpoint::PostWith(
    const std::string& peer, absl::Time deadline, ArrivalCallback on_arrival,
    absl::FunctionRef<std::unique_ptr<PostedRecv>(ArrivalCallback)> post) {
  auto recv = std::make_unique<Recv>(this, peer, deadline);
  recv->inner_ = post([recv = recv.get(), on_arrival = std::move(on_arrival)]() mutable {
    if (on_arrival) std::move(on_arrival)();
    recv->Arrived();
  });
  return recv;
}

std::shared_ptr<TcpEndpoint::Conn> TcpEndpoint::ConnFrom(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = out_.find(peer);
  if (it == out_.end()) return nullptr;
  return PreferredLocked(peer, it->second, [](const Conn& conn) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !conn.connecting && !conn.finished && conn.kick.valid();  // mu_ is held
  });
}

int TcpEndpoint::ReceivesReading(const std::string& peer) const {
  std::vector<std::shared_ptr<Conn>> conns;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = out_.find(peer); it != out_.end()) conns = it->second;
  }
  int reading = 0;
  for (const std::shared_ptr<Conn>& conn : conns) {
    absl::MutexLock lock(&conn->read_mu);
    reading += conn->readers_waiting;
  }
  return reading;
}

void TcpEndpoint::StopLingering(const Conn* except) {
  std::vector<std::shared_ptr<Conn>> conns;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [peer, list] : out_) conns.insert(conns.end(), list.begin(), list.end());
  }
  for (const std::shared_ptr<Conn>& conn : conns) {
    if (conn.get() == except) continue;
    absl::MutexLock lock(&conn->read_mu);
    conn->wanted = true;
  }
}

void TcpEndpoint::ReadForReceive(Recv& recv, bool briefly) {
  const std::shared_ptr<Conn> conn = ConnFrom(recv.peer_);
  const int event = ProgressEngine::ThreadEvent();
  if (conn == nullptr || event < 0) return;
  recv.event_.store(event, std::memory_order_release);
  const absl::Time begin = absl::Now();
  bool mine = false;
  {
    absl::MutexLock lock(&conn->read_mu);
    ++conn->readers_waiting;
    conn->turn_wanted.fetch_add(1, std::memory_order_release);
    if (conn->reader_polling) ProgressEngine::Signal(conn->kick.get());
    auto free = [&conn, &recv]() ABSL_SHARED_LOCKS_REQUIRED(conn->read_mu) {
      return !conn->reading || !conn->ended.ok() || recv.arrived_.load(std::memory_order_acquire);
    };
    // Whoever reads now may deliver this very receive (it touches read_mu after every frame, so
    // the condition is looked at again); a failure of the receive shows within a slice.
    const absl::Time turn_until =
        briefly ? std::min(recv.deadline_, begin + receive_spin_) : recv.deadline_;
    for (absl::Time now = begin; !free() && now < turn_until && !recv.inner_->Test();
         now = absl::Now()) {
      conn->read_mu.AwaitWithTimeout(absl::Condition(&free),
                                     std::min(kReadForReceiveSlice, turn_until - now));
    }
    mine = !conn->reading && conn->ended.ok();
    if (mine) conn->reading = true;
  }
  absl::Status ended;
  bool left_to_reader = false;
  if (mine) {
    // A brief wait lasts the spin from its start, the wait for the turn included.
    const absl::Time until =
        briefly ? std::min(recv.deadline_, begin + conn->read_spin.next()) : recv.deadline_;
    // Another frame in the way (a large one) is parked once this receive's message has come
    // another way, and left to whoever reads next.
    auto arrived = [&recv] { return recv.arrived_.load(std::memory_order_acquire); };
    const absl::FunctionRef<bool()> give_way = arrived;
    while (!recv.inner_->Test()) {
      const absl::Time now = absl::Now();
      if (now >= until) break;
      if (!conn->pending.has_value() && !conn->in->buffered()) {
        const Readable readable = AwaitFrame(*conn, recv, until);
        if (readable == Readable::kPollFailed) break;  // leave it to the reader thread
        if (readable == Readable::kNotYet) continue;
        conn->in->NoteReadable();
      }
      const ReadTurn turn{.for_receive = true,
                          .park = std::min(until, absl::Now() + kReadForReceiveSlice),
                          .limit = recv.deadline_,
                          .give_way = &give_way};
      absl::StatusOr<FrameRead> frame = ReadFrame(*conn, turn);
      if (!frame.ok()) {
        ended = frame.status();
        break;
      }
      if (*frame == FrameRead::kLeftToReader) {
        left_to_reader = true;
        break;
      }
      // Threads waiting for their turn re-check whether this frame was theirs.
      { absl::MutexLock lock(&conn->read_mu); }
    }
  }
  {
    absl::MutexLock lock(&conn->read_mu);
    if (mine) conn->reading = false;
    --conn->readers_waiting;
    conn->turn_wanted.fetch_sub(1, std::memory_order_release);
    conn->last_read_for_receive = absl::Now();
    // What is left half-read (or to the reader thread) is read on without lingering.
    if (left_to_reader || (mine && conn->in_frame != nullptr)) conn->wanted = true;
    if (!ended.ok() && conn->ended.ok()) conn->ended = ended;
  }
  recv.event_.store(-1, std::memory_order_release);
}

TcpEndpoint::Readable TcpEndpoint::AwaitFrame(Conn& conn, Recv& recv, absl::Time until) {
  pollfd watch{conn.fd.get(), POLLIN, 0};
  auto arrived = [&recv] { return recv.arrived_.load(std::memory_order_acquire); };
  switch (progress_->Await(std::span(&watch, 1), arrived,
                           std::min(until, absl::Now() + kReadForReceiveSlice), conn.read_spin)) {
    case ProgressEngine::Ready::kWork:
      return Readable::kYes;
    case ProgressEngine::Ready::kFailed:
      return Readable::kPollFailed;
    case ProgressEngine::Ready::kDone:
    case ProgressEngine::Ready::kTimedOut:
      return Readable::kNotYet;
  }
  return Readable::kNotYet;
}

}  // namespace baton::transport::tcp
