#include "transport/tcp/remote_write.h"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"
#include "transport/tcp/payload_reader.h"
#include "transport/tcp/tcp_endpoint.h"

namespace baton::transport::tcp {
namespace {

void Put64(uint64_t value, std::byte* out) {
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}
void Put32(uint32_t value, std::byte* out) {
  for (size_t i = 0; i < 4; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}
uint64_t Get64(const std::byte* in) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}
uint32_t Get32(const std::byte* in) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) value |= static_cast<uint32_t>(in[i]) << (8 * i);
  return value;
}

constexpr uint32_t kNotifyFlag = 1;
// The steps of a write's two frames (frame.h).
constexpr uint32_t kDescriptorStep = 0;
constexpr uint32_t kBytesStep = 1;
// The answers waiting to be sent: beyond this many (which a peer's writes would have to outrun
// the ack thread to reach), a write goes unanswered and its writer times out.
constexpr size_t kMaxAcksDue = 4096;
// Long enough to wait behind bulk data on the connection: an ack cut short would break it.
constexpr absl::Duration kAckTimeout = absl::Seconds(30);

}  // namespace

std::array<std::byte, kWriteDescriptorBytes> WriteDescriptor::Encode() const {
  std::array<std::byte, kWriteDescriptorBytes> out{};
  Put64(key, out.data());
  Put64(offset, out.data() + 8);
  Put64(length, out.data() + 16);
  Put64(notify.has_value() ? notify->total : 0, out.data() + 24);
  Put32(notify.has_value() ? notify->immediate : 0, out.data() + 32);
  Put32(notify.has_value() ? kNotifyFlag : 0, out.data() + 36);
  return out;
}

absl::StatusOr<WriteDescriptor> WriteDescriptor::Decode(
    std::span<const std::byte, kWriteDescriptorBytes> in) {
  WriteDescriptor descriptor;
  descriptor.key = Get64(in.data());
  descriptor.offset = Get64(in.data() + 8);
  descriptor.length = Get64(in.data() + 16);
  const uint64_t total = Get64(in.data() + 24);
  const uint32_t immediate = Get32(in.data() + 32);
  const uint32_t flags = Get32(in.data() + 36);
  if ((flags & ~kNotifyFlag) != 0) {
    return absl::DataLossError(absl::StrCat("unknown write flags 0x", absl::Hex(flags)));
  }
  if (descriptor.length > kMaxFramePayloadBytes) {
    return absl::DataLossError(
        absl::StrCat("a write of ", descriptor.length, " bytes, more than a frame may carry"));
  }
  if ((flags & kNotifyFlag) != 0) {
    descriptor.notify = ExposureTable::Notify{immediate, total};
  } else if (total != 0 || immediate != 0) {
    return absl::DataLossError("a write without notification that carries one");
  }
  return descriptor;
}

std::array<std::byte, kWriteAckPayloadBytes> WriteAck::Encode() const {
  std::array<std::byte, kWriteAckPayloadBytes> out{};
  Put64(write, out.data());
  Put32(static_cast<uint32_t>(refusal), out.data() + 8);
  return out;
}

absl::StatusOr<WriteAck> WriteAck::Decode(std::span<const std::byte, kWriteAckPayloadBytes> in) {
  WriteAck ack;
  ack.write = Get64(in.data());
  const uint32_t refusal = Get32(in.data() + 8);
  if (refusal > static_cast<uint32_t>(WriteRefusal::kOutOfBounds) || Get32(in.data() + 12) != 0) {
    return absl::DataLossError(
        absl::StrCat("a write ack with refusal ", refusal, " or reserved bytes set"));
  }
  ack.refusal = static_cast<WriteRefusal>(refusal);
  return ack;
}

// PostWrite's handle: complete once the receiver answered (or the write failed).
class TcpEndpoint::Write final : public PostedSend {
 public:
  Write(TcpEndpoint* endpoint, uint64_t id, absl::Time deadline)
      : endpoint_(endpoint), id_(id), deadline_(deadline) {}
  ~Write() override {
    if (result_.has_value()) return;
    // Nothing reads the buffer any more (the bytes went to the kernel in PostWrite): drop the
    // answer when it comes.
    absl::MutexLock lock(&endpoint_->writes_mu_);
    endpoint_->writes_.erase(id_);
  }

  absl::Status Wait() override {
    if (result_.has_value()) return *result_;
    absl::MutexLock lock(&endpoint_->writes_mu_);
    auto it = endpoint_->writes_.find(id_);
    auto answered = [&it]() { return it->second.result.has_value(); };
    if (!endpoint_->writes_mu_.AwaitWithDeadline(absl::Condition(&answered), deadline_)) {
      it->second.result = absl::DeadlineExceededError(
          absl::StrCat("no answer from peer ", it->second.peer, " to a write of ",
                       it->second.length, " bytes at offset ", it->second.offset, " (comm ",
                       absl::Hex(it->second.comm, absl::kZeroPad8), ") by the deadline"));
    }
    result_ = *it->second.result;
    endpoint_->writes_.erase(it);
    return *result_;
  }
  bool Test() override {
    if (result_.has_value()) return true;
    absl::MutexLock lock(&endpoint_->writes_mu_);
    auto it = endpoint_->writes_.find(id_);
    return it->second.result.has_value() || absl::Now() >= deadline_;
  }

 private:
  TcpEndpoint* const endpoint_;
  const uint64_t id_;
  const absl::Time deadline_;
  std::optional<absl::Status> result_;
};

void TcpEndpoint::StartWrites() {
  ack_thread_ = std::thread([this] {
    SetThreadName("baton-wack");
    WriteAckLoop();
  });
}

void TcpEndpoint::StopWrites() {
  {
    absl::MutexLock lock(&writes_mu_);
    writes_stopping_ = true;
    for (auto& [id, write] : writes_) {
      if (!write.result.has_value()) write.result = ShutDownError();
    }
  }
  if (ack_thread_.joinable()) ack_thread_.join();
  exposures_.Shutdown(ShutDownError());
}

std::unique_ptr<ExposedRegion> TcpEndpoint::ExposeRegion(const std::string& peer, uint64_t comm,
                                                         const RegionSlice& slice,
                                                         absl::Time deadline) {
  absl::StatusOr<ByteSpan> bytes = HostRegionBytes(peer, slice);
  if (!bytes.ok()) return FailedExposure(bytes.status());
  return exposures_.Expose(peer, comm, *bytes, deadline);
}

std::unique_ptr<PostedSend> TcpEndpoint::PostWrite(const std::string& peer, uint64_t comm,
                                                   const RegionSlice& source,
                                                   const RemoteRegion& target, size_t target_offset,
                                                   std::optional<uint32_t> notify,
                                                   absl::Time deadline) {
  absl::StatusOr<ByteSpan> bytes = HostRegionBytes(peer, source);
  if (!bytes.ok()) return CompletedSend(bytes.status());
  if (target_offset > target.length || bytes->size() > target.length - target_offset) {
    return CompletedSend(absl::InvalidArgumentError(
        absl::StrCat("a write of ", bytes->size(), " bytes at offset ", target_offset, " to peer ",
                     peer, " leaves the region of ", target.length, " bytes it describes")));
  }
  if (bytes->size() > kMaxFramePayloadBytes) {
    return CompletedSend(absl::InvalidArgumentError(
        absl::StrCat("a write of ", bytes->size(), " bytes to peer ", peer,
                     " exceeds the frame limit of ", kMaxFramePayloadBytes, " bytes")));
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status blocking = SendBlockingErrorLocked(comm); !blocking.ok()) {
      return CompletedSend(std::move(blocking));
    }
  }
  uint64_t id = 0;
  {
    absl::MutexLock lock(&writes_mu_);
    if (writes_stopping_) return CompletedSend(ShutDownError());
    id = next_write_++;
    writes_.emplace(id, PendingWrite{peer, comm, target_offset, bytes->size()});
  }
  auto write = std::make_unique<Write>(this, id, deadline);
  WriteDescriptor descriptor{target.key, target_offset, bytes->size(), std::nullopt};
  const uint64_t total =
      tally_.Add(peer, comm, target.key, bytes->size(), /*last=*/notify.has_value());
  if (notify.has_value()) descriptor.notify = ExposureTable::Notify{*notify, total};
  const std::array<std::byte, kWriteDescriptorBytes> encoded = descriptor.Encode();
  // Two frames in one SendFrames: one connection, one after the other (frame.h).
  const OutMessage frames[] = {
      {Tag{.comm = comm, .seq = id, .step = kDescriptorStep}, encoded},
      {Tag{.comm = comm, .seq = id, .step = kBytesStep}, *bytes},
  };
  const absl::Status sent = SendFrames(peer, FrameType::kWrite, frames, deadline);
  {
    absl::MutexLock lock(&mu_);
    CountSendLocked(peer, bytes->size() + kWriteOverheadBytes - kFrameHeaderBytes, sent.ok());
  }
  if (!sent.ok()) {
    absl::MutexLock lock(&writes_mu_);
    PendingWrite& pending = writes_.at(id);
    if (!pending.result.has_value()) pending.result = sent;
  }
  return write;
}

absl::Status TcpEndpoint::ReadWrite(Conn& conn, const FrameHeader& header, absl::Time limit) {
  const std::string& peer = conn.peer;
  RecordCipher* open = conn.open.has_value() ? &*conn.open : nullptr;
  // Whatever breaks the write protocol leaves the stream out of step, as a bad header does.
  auto out_of_step = [&](absl::string_view why) {
    CountError(peer);
    absl::Status error =
        absl::DataLossError(absl::StrCat("a write from peer ", peer, " is not valid: ", why));
    DataLostFrom(peer, error);
    return error;
  };
  if (header.tag.step != kDescriptorStep || header.payload_bytes != kWriteDescriptorBytes) {
    return out_of_step("its bytes came without their descriptor");
  }
  std::array<std::byte, kWriteDescriptorBytes> raw;
  // Checked before it is acted on: a descriptor altered on the way never names a region.
  BATON_RETURN_IF_ERROR(ReadControlPayload(conn, header, raw, limit));
  absl::StatusOr<WriteDescriptor> descriptor = WriteDescriptor::Decode(raw);
  if (!descriptor.ok()) return out_of_step(descriptor.status().message());

  // The bytes: the next frame on this connection.
  std::array<std::byte, kFrameHeaderBytes> header_bytes;
  size_t header_read = 0;
  if (absl::Status status = conn.in->Read(header_bytes, limit, &header_read); !status.ok()) {
    CountError(peer);
    return status;
  }
  absl::StatusOr<FrameHeader> data_header = DecodeFrameHeader(header_bytes);
  if (data_header.ok()) {
    if (absl::Status fits = FitsConnection(*data_header, open); !fits.ok()) data_header = fits;
  }
  if (!data_header.ok()) return out_of_step(data_header.status().message());
  if (data_header->type != FrameType::kWrite || data_header->tag.step != kBytesStep ||
      data_header->tag.comm != header.tag.comm || data_header->tag.seq != header.tag.seq ||
      data_header->payload_bytes != descriptor->length) {
    return out_of_step("its descriptor is not followed by its bytes");
  }
  PayloadReader body(*conn.in, *data_header, open);
  // Consumes the rest of bytes that go nowhere, to keep the stream in step.
  auto drain = [&] { return body.Skip(conn.scratch, limit); };
  const uint64_t comm = header.tag.comm;
  absl::StatusOr<ExposureTable::Write> write =
      exposures_.BeginWrite(peer, comm, descriptor->key, descriptor->offset, descriptor->length);
  if (!write.ok()) {
    absl::Status status = drain();
    if (!body.intact()) return IntegrityFailure(peer, *data_header);
    if (!status.ok()) {
      CountError(peer);
      return status;
    }
    QueueWriteAck(peer, header.tag,
                  absl::IsInvalidArgument(write.status()) ? WriteRefusal::kOutOfBounds
                                                          : WriteRefusal::kNoRegion);
    return absl::OkStatus();
  }
  // Straight into the exposed region; its owner revoking it (or its deadline) stops the read.
  auto cancelled_check = [&write] { return write->cancelled(); };
  const absl::FunctionRef<bool()> cancelled = cancelled_check;
  const absl::Time deadline = std::min(write->deadline(), limit);
  size_t read = 0;
  absl::Status status = body.Read(write->target(), deadline, &cancelled, &read);
  if (status.ok()) status = body.Finish(deadline, &cancelled);
  if (!body.intact()) {
    absl::Status error = IntegrityFailure(peer, *data_header);
    exposures_.FinishWrite(*std::move(write), error, std::nullopt);
    return error;
  }
  if (status.ok()) {
    exposures_.FinishWrite(*std::move(write), absl::OkStatus(), descriptor->notify,
                           kWriteOverheadBytes);
    QueueWriteAck(peer, header.tag, WriteRefusal::kNone);
    return absl::OkStatus();
  }
  if (absl::IsDeadlineExceeded(status) || absl::IsCancelled(status)) {
    // The region gave up, not the link: release it now, then skip the rest of the bytes.
    exposures_.FinishWrite(*std::move(write),
                           absl::IsDeadlineExceeded(status)
                               ? absl::DeadlineExceededError(absl::StrCat(
                                     "the write from peer ", peer,
                                     " into the region exposed to it passed its deadline"))
                               : absl::CancelledError("the exposed region was revoked"),
                           std::nullopt);
    status = drain();
    if (!body.intact()) return IntegrityFailure(peer, *data_header);
    if (!status.ok()) {
      CountError(peer);
      return status;
    }
    QueueWriteAck(peer, header.tag, WriteRefusal::kNoRegion);
    return absl::OkStatus();
  }
  CountError(peer);
  exposures_.FinishWrite(*std::move(write),
                         absl::UnavailableError(absl::StrCat("lost connection from peer ", peer,
                                                             ": ", status.message())),
                         std::nullopt);
  return status;
}

absl::Status TcpEndpoint::ReadWriteAck(Conn& conn, const FrameHeader& header, absl::Time limit) {
  std::array<std::byte, kWriteAckPayloadBytes> payload;
  BATON_RETURN_IF_ERROR(ReadControlPayload(conn, header, payload, limit));
  absl::StatusOr<WriteAck> ack = WriteAck::Decode(payload);
  if (!ack.ok()) {
    CountError(conn.peer);
    absl::Status error = absl::DataLossError(absl::StrCat(
        "a write ack from peer ", conn.peer, " is not valid: ", ack.status().message()));
    DataLostFrom(conn.peer, error);
    return error;
  }
  absl::MutexLock lock(&writes_mu_);
  auto it = writes_.find(ack->write);
  // Only the peer written to answers for a write; one whose writer gave up is dropped.
  if (it == writes_.end() || it->second.peer != conn.peer || it->second.result.has_value()) {
    return absl::OkStatus();
  }
  const PendingWrite& write = it->second;
  it->second.result =
      ack->refusal == WriteRefusal::kNone
          ? absl::OkStatus()
          : WriteRefusedError(write.peer, write.comm, write.offset, write.length, ack->refusal);
  return absl::OkStatus();
}

void TcpEndpoint::QueueWriteAck(const std::string& peer, const Tag& tag, WriteRefusal refusal) {
  absl::MutexLock lock(&writes_mu_);
  if (writes_stopping_ || acks_due_.size() >= kMaxAcksDue) return;
  acks_due_.push_back(AckDue{peer, WriteAck{tag.seq, refusal}});
}

void TcpEndpoint::WriteAckLoop() {
  absl::MutexLock lock(&writes_mu_);
  while (true) {
    auto due = [this]() ABSL_SHARED_LOCKS_REQUIRED(writes_mu_) {
      return writes_stopping_ || !acks_due_.empty();
    };
    writes_mu_.Await(absl::Condition(&due));
    if (writes_stopping_) return;
    const AckDue ack = std::move(acks_due_.front());
    acks_due_.pop_front();
    writes_mu_.Unlock();
    const std::array<std::byte, kWriteAckPayloadBytes> payload = ack.ack.Encode();
    // Under no communicator's tag: an answer goes out even when the write's communicator was
    // aborted here (its writer learns of the refusal instead of waiting for its deadline).
    const OutMessage frame{Tag{.seq = ack.ack.write}, payload};
    const absl::Status sent =
        SendFrames(ack.peer, FrameType::kWriteAck, std::span(&frame, 1), absl::Now() + kAckTimeout);
    if (!sent.ok()) {
      spdlog::debug("tcp endpoint {}: no write ack to peer {}: {}", address_, ack.peer,
                    sent.ToString());
    }
    writes_mu_.Lock();
  }
}

void TcpEndpoint::WritesLost(const std::string& peer, const absl::Status& status) {
  exposures_.PeerLost(peer, status);
  absl::MutexLock lock(&writes_mu_);
  for (auto& [id, write] : writes_) {
    if (write.peer != peer || write.result.has_value()) continue;
    write.result = absl::UnavailableError(
        absl::StrCat("lost connection to peer ", peer, " before it answered a write of ",
                     write.length, " bytes at offset ", write.offset, ": ", status.message()));
  }
}

void TcpEndpoint::AbortWrites(uint64_t comm, const absl::Status& reason) {
  exposures_.Abort(comm, reason);
  absl::MutexLock lock(&writes_mu_);
  for (auto& [id, write] : writes_) {
    if (write.comm == comm && !write.result.has_value()) write.result = reason;
  }
}

void TcpEndpoint::ForgetWrites(uint64_t comm) {
  exposures_.Forget(comm);
  tally_.Forget(comm);
}

}  // namespace baton::transport::tcp
