#include "collective/point_to_point.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/registered_memory.h"
#include "common/status_macros.h"

namespace baton::collective {
namespace {

// Part 0 of every message across daemons: its length and the sender's chunk size. The receiver
// cannot learn a message's length from the transport (a receive must name it), and needs both to
// know which pieces to expect when its own guess was wrong.
constexpr size_t kHeaderBytes = 16;
// The part number is 32 bits and part 0 is the header.
constexpr uint64_t kMaxPieces = UINT32_MAX - 1;
// How often a waiting receive looks for failures that the transport reports only through Wait
// (a lost peer, the transport's own abort): arrivals and our Abort wake it at once, so only these
// rare failures take up to this long to notice, for 100 wake-ups a second while it waits.
constexpr absl::Duration kFailurePoll = absl::Milliseconds(10);

void Store64(uint64_t value, std::byte* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

uint64_t Load64(const std::byte* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

uint64_t PieceCount(uint64_t length, uint64_t chunk) {
  return length / chunk + (length % chunk != 0);
}

// Piece `index` (from 0) of a message of `length` bytes cut into `chunk`-byte pieces.
std::pair<uint64_t, uint64_t> PieceOf(uint64_t length, uint64_t chunk, uint64_t index) {
  const uint64_t begin = index * chunk;
  return {begin, std::min(chunk, length - begin)};
}

std::string MessageName(int src, int dst, uint64_t number) {
  return absl::StrCat("message ", number, " from rank ", src, " to rank ", dst);
}

// `bytes` as the caller counts: elements of `element_bytes` when they divide it, else bytes.
std::string Amount(uint64_t bytes, size_t element_bytes) {
  if (element_bytes > 1 && bytes % element_bytes == 0) {
    return absl::StrCat(bytes / element_bytes, " elements (", bytes, " bytes)");
  }
  return absl::StrCat(bytes, " bytes");
}

absl::Status LengthMismatch(int src, int dst, uint64_t number, uint64_t sent, size_t buffer,
                            size_t element_bytes) {
  return absl::FailedPreconditionError(
      absl::StrCat("point-to-point: rank ", src, " sent ", Amount(sent, element_bytes), " to rank ",
                   dst, ", whose receive is of ", Amount(buffer, element_bytes), " (",
                   MessageName(src, dst, number), "; the message was dropped)"));
}

}  // namespace

// A receive from another daemon in progress: which of its parts have arrived, and whether Abort
// was called. The transport's arrival callbacks and Abort write it; the receiving thread waits on
// it.
struct PointToPoint::RemoteReceive {
  RemoteReceive(size_t parts, int src, int dst) : src(src), dst(dst), arrived(parts, false) {}
  const int src;
  const int dst;
  uint64_t number = 0;  // set under PointToPoint::mu_ before it is in receiving_
  absl::Mutex mu;
  std::vector<bool> arrived ABSL_GUARDED_BY(mu);  // by part number; part 0 is the header
  absl::Status aborted ABSL_GUARDED_BY(mu);

  void MarkArrived(size_t part) {
    absl::MutexLock lock(&mu);
    arrived[part] = true;
  }
};

PointToPoint::PointToPoint(transport::Endpoint* endpoint, uint64_t comm, Layout layout,
                           size_t chunk_bytes)
    : endpoint_(endpoint),
      comm_(comm),
      layout_(std::move(layout)),
      chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
      daemon_of_(static_cast<size_t>(std::max(layout_.world_size, 0)), -1) {
  for (size_t d = 0; d < layout_.daemons.size(); ++d) {
    for (int rank : layout_.daemons[d].ranks) {
      if (rank >= 0 && rank < layout_.world_size) {
        daemon_of_[static_cast<size_t>(rank)] = static_cast<int>(d);
      }
    }
  }
}

PointToPoint::~PointToPoint() = default;

absl::Status PointToPoint::CheckRank(const char* role, int rank, bool local) const {
  if (rank < 0 || rank >= layout_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("point-to-point: ", role, " rank ", rank,
                                                   " is out of range for a communicator of ",
                                                   layout_.world_size, " ranks"));
  }
  const int daemon = daemon_of_[static_cast<size_t>(rank)];
  if (daemon < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("point-to-point: no daemon of the communicator hosts ", role, " rank ", rank));
  }
  if (local && daemon != layout_.self) {
    return absl::InvalidArgumentError(
        absl::StrCat("point-to-point: ", role, " rank ", rank, " is on daemon ", daemon, " (",
                     layout_.daemons[static_cast<size_t>(daemon)].address,
                     "), not on this one (daemon ", layout_.self, ")"));
  }
  return absl::OkStatus();
}

transport::Tag PointToPoint::TagOf(int src, int dst, uint64_t number, uint32_t part) const {
  const uint64_t seq =
      (uint64_t{1} << 63) | (static_cast<uint64_t>(src) << 32) | static_cast<uint32_t>(dst);
  return transport::Tag{comm_, seq, static_cast<uint32_t>(number), part};
}

absl::Status PointToPoint::Send(int src, int dst, transport::ConstByteSpan data,
                                absl::Time deadline, size_t element_bytes,
                                const transport::MemoryRegion* region) {
  BATON_RETURN_IF_ERROR(CheckRank("sending", src, /*local=*/true));
  BATON_RETURN_IF_ERROR(CheckRank("destination", dst, /*local=*/false));
  if (IsLocal(dst)) return SendLocal(src, dst, data, element_bytes);
  return SendRemote(src, dst, data, deadline, region);
}

absl::Status PointToPoint::Recv(int src, int dst, transport::ByteSpan data, absl::Time deadline,
                                size_t element_bytes, const transport::MemoryRegion* region) {
  BATON_RETURN_IF_ERROR(CheckRank("receiving", dst, /*local=*/true));
  BATON_RETURN_IF_ERROR(CheckRank("source", src, /*local=*/false));
  if (IsLocal(src)) return RecvLocal(src, dst, data, deadline, element_bytes);
  return RecvRemote(src, dst, data, deadline, element_bytes, region);
}

void PointToPoint::Abort(const absl::Status& reason) {
  std::vector<std::deque<std::vector<std::byte>>> dropped;  // freed without the lock
  absl::MutexLock lock(&mu_);
  if (abort_.ok()) {
    abort_ = reason.ok() ? absl::CancelledError("point-to-point aborted without a reason") : reason;
  }
  for (RemoteReceive* receive : receiving_) {
    absl::MutexLock receive_lock(&receive->mu);
    if (receive->aborted.ok()) receive->aborted = abort_;
  }
  for (auto& [key, pair] : pairs_) {
    if (!pair.queued.empty()) dropped.push_back(std::move(pair.queued));
    pair.queued.clear();
  }
}

Departure PointToPoint::SentBy(int src) const {
  Departure departure;
  departure.rank = src;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, pair] : pairs_) {
    if (key.first == src && pair.sent > 0) departure.sent.emplace_back(key.second, pair.sent);
  }
  std::sort(departure.sent.begin(), departure.sent.end());
  return departure;
}

absl::Status PointToPoint::NeverSentLocked(int src, int dst, uint64_t number) const {
  auto it = left_.find(src);
  if (it == left_.end()) return absl::OkStatus();
  auto sent = it->second.sent.find(dst);
  const uint64_t count = sent == it->second.sent.end() ? 0 : sent->second;
  if (number < count) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "point-to-point: rank ", src, " left the communicator after sending ", count,
      count == 1 ? " message" : " messages", " to rank ", dst, ", so ",
      MessageName(src, dst, number), " will never come: ", it->second.reason.message()));
}

void PointToPoint::SourceLeft(const Departure& departure, const absl::Status& reason) {
  if (departure.rank < 0 || departure.rank >= layout_.world_size) return;
  absl::MutexLock lock(&mu_);
  Left& left = left_[departure.rank];
  left.reason = reason;
  for (const auto& [dst, messages] : departure.sent) {
    if (dst >= 0 && dst < layout_.world_size) left.sent[dst] = messages;
  }
  for (auto& [key, pair] : pairs_) {
    if (key.first != departure.rank) continue;
    for (auto it = pair.waiting.begin(); it != pair.waiting.end();) {
      LocalWaiter* waiter = it->second;
      absl::Status never = NeverSentLocked(key.first, key.second, it->first);
      if (never.ok() || waiter->claimed) {
        ++it;
        continue;
      }
      waiter->result = std::move(never);
      waiter->done = true;
      pair.waiting.erase(it++);
    }
  }
  for (RemoteReceive* receive : receiving_) {
    if (receive->src != departure.rank) continue;
    absl::Status never = NeverSentLocked(receive->src, receive->dst, receive->number);
    if (never.ok()) continue;
    absl::MutexLock receive_lock(&receive->mu);
    if (receive->aborted.ok()) receive->aborted = std::move(never);
  }
}

size_t PointToPoint::WaitingLocalRecvs(int src, int dst) const {
  absl::MutexLock lock(&mu_);
  auto it = pairs_.find({src, dst});
  return it == pairs_.end() ? 0 : it->second.waiting.size();
}

// ---- Within the daemon ----

// The copy into a waiting receiver's buffer is made without the lock: a Send claims the waiter,
// which then waits only for that memcpy, whatever its deadline or an Abort, so that its buffer is
// never written after Recv returned. A message for a receiver not waiting yet is copied into a
// buffer of its own before the lock is taken again, so no large copy holds up other pairs; the
// message number is taken together with the queueing, so the queue stays in order.
absl::Status PointToPoint::SendLocal(int src, int dst, transport::ConstByteSpan data,
                                     size_t element_bytes) {
  std::vector<std::byte> copy;
  bool copied = false;
  LocalWaiter* waiter = nullptr;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!abort_.ok()) return abort_;
      Pair& pair = pairs_[{src, dst}];
      const uint64_t number = pair.sent;
      if (number < pair.received) {  // its Recv has begun
        ++pair.sent;
        auto it = pair.waiting.find(number);
        if (it == pair.waiting.end()) return absl::OkStatus();  // that Recv failed: dropped
        waiter = it->second;
        pair.waiting.erase(it);
        if (waiter->data.size() != data.size()) {
          // Both ranks are here at once: both learn of it.
          waiter->result =
              LengthMismatch(src, dst, number, data.size(), waiter->data.size(), element_bytes);
          waiter->done = true;
          return waiter->result;
        }
        waiter->claimed = true;
        break;
      }
      if (copied) {
        ++pair.sent;
        pair.queued.push_back(std::move(copy));
        return absl::OkStatus();
      }
    }
    copy.assign(data.begin(), data.end());
    copied = true;
  }
  if (!data.empty()) std::memcpy(waiter->data.data(), data.data(), data.size());
  absl::MutexLock lock(&mu_);
  waiter->done = true;
  return absl::OkStatus();
}

absl::Status PointToPoint::RecvLocal(int src, int dst, transport::ByteSpan data,
                                     absl::Time deadline, size_t element_bytes) {
  std::vector<std::byte> message;
  uint64_t number;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_.ok()) return abort_;
    Pair& pair = pairs_[{src, dst}];
    number = pair.received++;
    if (number >= pair.sent) {
      BATON_RETURN_IF_ERROR(NeverSentLocked(src, dst, number));
      LocalWaiter waiter;
      waiter.data = data;
      pair.waiting.emplace(number, &waiter);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return waiter.done || (!waiter.claimed && !abort_.ok());
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
      if (waiter.claimed) mu_.Await(absl::Condition(&waiter.done));  // a memcpy away
      if (waiter.done) return waiter.result;
      pair.waiting.erase(number);  // the message will be dropped when it comes
      if (!abort_.ok()) return abort_;
      return absl::DeadlineExceededError(
          absl::StrCat("point-to-point: rank ", dst, " timed out waiting for ",
                       MessageName(src, dst, number), " (both on this daemon)"));
    }
    message = std::move(pair.queued.front());
    pair.queued.pop_front();
  }
  if (message.size() != data.size()) {
    return LengthMismatch(src, dst, number, message.size(), data.size(), element_bytes);
  }
  if (!data.empty()) std::memcpy(data.data(), message.data(), data.size());
  return absl::OkStatus();
}

// ---- Across daemons ----

absl::Status PointToPoint::SendRemote(int src, int dst, transport::ConstByteSpan data,
                                      absl::Time deadline, const transport::MemoryRegion* region) {
  const uint64_t pieces = PieceCount(data.size(), chunk_bytes_);
  if (pieces > kMaxPieces) {
    return absl::InvalidArgumentError(
        absl::StrCat("point-to-point: a message of ", data.size(), " bytes from rank ", src,
                     " to rank ", dst, " needs more than 2^32 pieces of ", chunk_bytes_, " bytes"));
  }
  uint64_t number;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_.ok()) return abort_;
    number = pairs_[{src, dst}].sent++;
  }
  const std::string& peer = AddressOf(dst);
  std::array<std::byte, kHeaderBytes> header;
  Store64(data.size(), header.data());
  Store64(chunk_bytes_, header.data() + 8);
  // About one chunk per SendAll: small messages go with their header in one hand-over (one
  // system call for TCP), and between the pieces of a large one an Abort is noticed.
  std::vector<transport::OutMessage> batch = {{TagOf(src, dst, number, 0), header}};
  size_t batch_bytes = kHeaderBytes;
  for (uint64_t next = 0;;) {
    while (next < pieces && batch_bytes < chunk_bytes_) {
      const auto [begin, length] = PieceOf(data.size(), chunk_bytes_, next);
      batch.push_back({TagOf(src, dst, number, static_cast<uint32_t>(next + 1)),
                       data.subspan(begin, length), region});
      batch_bytes += length;
      ++next;
    }
    const absl::Status status = endpoint_->SendAll(peer, batch, deadline);
    absl::MutexLock lock(&mu_);
    if (!abort_.ok()) return abort_;
    if (!status.ok()) {
      return Annotate(
          status, absl::StrCat("point-to-point: sending ", MessageName(src, dst, number), " (rank ",
                               dst, " is on daemon ", peer, ")"));
    }
    if (next == pieces) return absl::OkStatus();
    batch.clear();
    batch_bytes = 0;
  }
}

absl::Status PointToPoint::AwaitPiece(RemoteReceive& receive, size_t part,
                                      transport::PostedRecv& posted, absl::Time deadline) {
  // Wait enforces the deadline; the arrival callback runs just before the receive completes, and
  // does not run for a receive that fails (on its length, too), which Test finds.
  while (!posted.Test() && absl::Now() < deadline) {
    absl::MutexLock lock(&receive.mu);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(receive.mu) {
      return receive.arrived[part] || !receive.aborted.ok();
    };
    receive.mu.AwaitWithDeadline(absl::Condition(&ready),
                                 std::min(deadline, absl::Now() + kFailurePoll));
    if (!receive.aborted.ok()) return receive.aborted;
    if (receive.arrived[part]) break;
  }
  return posted.Wait();
}

absl::Status PointToPoint::RecvRemote(int src, int dst, transport::ByteSpan data,
                                      absl::Time deadline, size_t element_bytes,
                                      const transport::MemoryRegion* region) {
  const uint64_t expected = PieceCount(data.size(), chunk_bytes_);
  if (expected > kMaxPieces) {
    return absl::InvalidArgumentError(absl::StrCat(
        "point-to-point: a receive of ", data.size(), " bytes by rank ", dst, " from rank ", src,
        " needs more than 2^32 pieces of ", chunk_bytes_, " bytes"));
  }
  RemoteReceive receive(expected + 1, src, dst);
  uint64_t number;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_.ok()) return abort_;
    number = pairs_[{src, dst}].received++;
    BATON_RETURN_IF_ERROR(NeverSentLocked(src, dst, number));
    receive.number = number;
    receiving_.insert(&receive);
  }
  bool mismatch = false;
  absl::Status status =
      ReceivePieces(receive, src, dst, number, data, deadline, element_bytes, region, mismatch);
  absl::MutexLock lock(&mu_);
  receiving_.erase(&receive);
  if (status.ok() || mismatch) return status;
  if (!abort_.ok()) return abort_;
  BATON_RETURN_IF_ERROR(NeverSentLocked(src, dst, number));
  const std::string& peer = AddressOf(src);
  if (absl::IsDeadlineExceeded(status)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "point-to-point: rank ", dst, " timed out waiting for ", MessageName(src, dst, number),
        " (rank ", src, " is on daemon ", peer, "): ", status.message()));
  }
  return Annotate(status, absl::StrCat("point-to-point: receiving ", MessageName(src, dst, number),
                                       " (rank ", src, " is on daemon ", peer, ")"));
}

// The pieces the receiver expects (its own length, its own chunk size) are posted before the
// header is known, straight into `data`. When the header then says otherwise, every piece the
// sender sent must still be taken from the transport, so that none is left behind: the
// receives posted for pieces it sent complete either way (into `data`, or failing on their
// length, which drops the piece), those for pieces it did not send are withdrawn, and the
// pieces beyond those posted are consumed and dropped.
absl::Status PointToPoint::ReceivePieces(RemoteReceive& receive, int src, int dst, uint64_t number,
                                         transport::ByteSpan data, absl::Time deadline,
                                         size_t element_bytes,
                                         const transport::MemoryRegion* region, bool& mismatch) {
  const std::string& peer = AddressOf(src);
  // The pieces go into `data` through its registration.
  RegionTable regions;
  regions.Add(region);
  RegisteredEndpoint registered(endpoint_, {&regions});
  const uint64_t expected = PieceCount(data.size(), chunk_bytes_);
  auto signal = [&receive](uint32_t part) {
    return [&receive, part]() { receive.MarkArrived(part); };
  };
  std::array<std::byte, kHeaderBytes> header;
  std::unique_ptr<transport::PostedRecv> posted_header =
      endpoint_->PostRecv(peer, TagOf(src, dst, number, 0), header, deadline, signal(0));
  std::vector<std::unique_ptr<transport::PostedRecv>> posted;  // posted[i]: part i + 1
  posted.reserve(expected);
  for (uint64_t i = 0; i < expected; ++i) {
    const auto [begin, length] = PieceOf(data.size(), chunk_bytes_, i);
    const auto part = static_cast<uint32_t>(i + 1);
    posted.push_back(registered.PostRecv(peer, TagOf(src, dst, number, part),
                                         data.subspan(begin, length), deadline, signal(part)));
  }
  BATON_RETURN_IF_ERROR(AwaitPiece(receive, 0, *posted_header, deadline));

  const uint64_t length = Load64(header.data());
  const uint64_t chunk = Load64(header.data() + 8);
  if (chunk == 0 || PieceCount(length, chunk) > kMaxPieces) {
    return absl::DataLossError(absl::StrCat("point-to-point: the header of ",
                                            MessageName(src, dst, number), " says ", length,
                                            " bytes in pieces of ", chunk));
  }
  const uint64_t pieces = PieceCount(length, chunk);
  if (length == data.size() && pieces == expected && (pieces <= 1 || chunk == chunk_bytes_)) {
    for (uint64_t i = 0; i < expected; ++i) {
      BATON_RETURN_IF_ERROR(AwaitPiece(receive, i + 1, *posted[i], deadline));
    }
    return absl::OkStatus();
  }

  {
    absl::MutexLock lock(&receive.mu);
    receive.arrived.resize(std::max(expected, pieces) + 1, false);
  }
  for (uint64_t i = pieces; i < expected; ++i) posted[i].reset();
  std::vector<std::unique_ptr<transport::PostedRecv>> dropped;  // dropped[i]: part expected+i+1
  for (uint64_t i = expected; i < pieces; ++i) {
    const uint64_t piece_bytes = PieceOf(length, chunk, i).second;
    const auto part = static_cast<uint32_t>(i + 1);
    dropped.push_back(endpoint_->PostConsume(
        peer, TagOf(src, dst, number, part), piece_bytes, deadline,
        [&receive, part, piece_bytes](size_t offset, transport::ConstByteSpan bytes) {
          if (offset + bytes.size() == piece_bytes) receive.MarkArrived(part);
        }));
  }
  for (uint64_t i = 0; i < std::min(expected, pieces); ++i) {
    absl::Status status = AwaitPiece(receive, i + 1, *posted[i], deadline);
    if (!status.ok() && !absl::IsFailedPrecondition(status)) return status;  // not dropped
  }
  for (uint64_t i = expected; i < pieces; ++i) {
    BATON_RETURN_IF_ERROR(AwaitPiece(receive, i + 1, *dropped[i - expected], deadline));
  }
  mismatch = true;
  if (length != data.size()) {
    return LengthMismatch(src, dst, number, length, data.size(), element_bytes);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("point-to-point: daemon ", peer, " cut ", MessageName(src, dst, number),
                   " into pieces of ", chunk, " bytes, this daemon into pieces of ", chunk_bytes_,
                   " (every daemon of a communicator must use one chunk size)"));
}

}  // namespace baton::collective
