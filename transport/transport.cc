#include "transport/transport.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace baton::transport {

std::string TagToString(const Tag& tag) {
  return absl::StrCat("comm ", absl::Hex(tag.comm, absl::kZeroPad8), " op ", tag.seq, " step ",
                      tag.step, " part ", tag.part);
}

absl::Status CheckSendAll(const std::string& peer, std::span<const OutMessage> messages) {
  for (const OutMessage& message : messages) {
    if (message.tag.comm != messages.front().tag.comm) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the messages of one SendAll to peer ", peer, " belong to different communicators (",
          TagToString(messages.front().tag), "; ", TagToString(message.tag), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Endpoint::SendAll(const std::string& peer, std::span<const OutMessage> messages,
                               absl::Time deadline) {
  BATON_RETURN_IF_ERROR(CheckSendAll(peer, messages));
  for (const OutMessage& message : messages) {
    BATON_RETURN_IF_ERROR(Send(peer, message.tag, message.data, deadline));
  }
  return absl::OkStatus();
}

namespace {

// Endpoint::PostConsume's default: the message goes into a buffer of its own, handed over whole.
class BufferedConsume final : public PostedRecv {
 public:
  explicit BufferedConsume(size_t length)
      : buffer_(std::make_unique_for_overwrite<std::byte[]>(length)), length_(length) {}
  absl::Status Wait() override { return inner_->Wait(); }
  bool Test() override { return inner_->Test(); }
  bool WaitBriefly() override { return inner_->WaitBriefly(); }

  ByteSpan buffer() { return ByteSpan(buffer_.get(), length_); }
  void set_inner(std::unique_ptr<PostedRecv> inner) { inner_ = std::move(inner); }

 private:
  const std::unique_ptr<std::byte[]> buffer_;
  const size_t length_;
  // Declared last, so destroyed first: it may still be writing into the buffer.
  std::unique_ptr<PostedRecv> inner_;
};

}  // namespace

std::unique_ptr<PostedRecv> Endpoint::PostConsume(const std::string& peer, const Tag& tag,
                                                  size_t length, absl::Time deadline,
                                                  PieceConsumer consume) {
  auto recv = std::make_unique<BufferedConsume>(length);
  const ByteSpan buffer = recv->buffer();
  recv->set_inner(
      PostRecv(peer, tag, buffer, deadline, [buffer, consume = std::move(consume)]() mutable {
        if (!buffer.empty()) consume(0, buffer);
      }));
  return recv;
}

absl::StatusOr<absl::Duration> Endpoint::RoundTrip(const std::string& peer, absl::Time) {
  return absl::UnimplementedError(
      absl::StrCat("this transport does not time round trips (to peer ", peer, ")"));
}

absl::StatusOr<ByteSpan> MemoryRegion::Slice(size_t offset, size_t length) const {
  if (offset > bytes_.size() || length > bytes_.size() - offset) {
    return absl::InvalidArgumentError(absl::StrCat("the ", length, " bytes at offset ", offset,
                                                   " do not lie inside the registered region of ",
                                                   bytes_.size(), " bytes"));
  }
  return bytes_.subspan(offset, length);
}

std::unique_ptr<MemoryRegion> HostMemoryRegion(ByteSpan bytes) {
  return std::make_unique<MemoryRegion>(bytes, MemoryKind::kHost);
}

namespace {

class FailedPostedRecv final : public PostedRecv {
 public:
  explicit FailedPostedRecv(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }
  bool Test() override { return true; }

 private:
  const absl::Status status_;
};

}  // namespace

absl::StatusOr<ByteSpan> HostRegionBytes(const std::string& peer, const RegionSlice& slice) {
  if (slice.region == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("a send or receive with peer ", peer, " names no registered region"));
  }
  if (slice.region->kind() != MemoryKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat("this transport cannot move ",
                                                   MemoryKindName(slice.region->kind()),
                                                   " memory (peer ", peer, ")"));
  }
  return slice.region->Slice(slice.offset, slice.length);
}

std::unique_ptr<PostedRecv> FailedRecv(absl::Status status) {
  return std::make_unique<FailedPostedRecv>(
      status.ok() ? absl::InternalError("FailedRecv given an OK status") : std::move(status));
}

namespace {

class CompletedPostedSend final : public PostedSend {
 public:
  explicit CompletedPostedSend(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }
  bool Test() override { return true; }

 private:
  const absl::Status status_;
};

class FailedExposedRegion final : public ExposedRegion {
 public:
  explicit FailedExposedRegion(absl::Status status) : status_(std::move(status)) {}
  const RemoteRegion& descriptor() const override { return descriptor_; }
  absl::StatusOr<WriteNotice> Wait() override { return status_; }
  bool Test() override { return true; }

 private:
  const RemoteRegion descriptor_;
  const absl::Status status_;
};

constexpr std::array<std::byte, 4> kRemoteRegionMagic = {std::byte{'B'}, std::byte{'T'},
                                                         std::byte{'R'}, std::byte{'R'}};
constexpr std::byte kRemoteRegionVersion{1};

// Byte by byte, so that the encoding does not depend on the host's byte order.
void PutUint64(uint64_t value, std::byte* out) {
  for (size_t i = 0; i < sizeof(value); ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

uint64_t GetUint64(const std::byte* in) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(value); ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

}  // namespace

std::unique_ptr<PostedSend> CompletedSend(absl::Status status) {
  return std::make_unique<CompletedPostedSend>(std::move(status));
}

std::unique_ptr<ExposedRegion> FailedExposure(absl::Status status) {
  return std::make_unique<FailedExposedRegion>(
      status.ok() ? absl::InternalError("FailedExposure given an OK status") : std::move(status));
}

RemoteRegion::Encoded RemoteRegion::Encode() const {
  Encoded out{};
  std::copy(kRemoteRegionMagic.begin(), kRemoteRegionMagic.end(), out.begin());
  out[4] = kRemoteRegionVersion;
  PutUint64(address, out.data() + 8);
  PutUint64(length, out.data() + 16);
  PutUint64(key, out.data() + 24);
  return out;
}

absl::StatusOr<RemoteRegion> RemoteRegion::Decode(ConstByteSpan bytes) {
  if (bytes.size() != kEncodedBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a remote region descriptor has ", kEncodedBytes,
                                                   " bytes, not ", bytes.size()));
  }
  if (!std::equal(kRemoteRegionMagic.begin(), kRemoteRegionMagic.end(), bytes.begin())) {
    return absl::InvalidArgumentError("not a remote region descriptor (bad magic)");
  }
  if (bytes[4] != kRemoteRegionVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote region descriptor of unknown version ", static_cast<int>(bytes[4])));
  }
  if (bytes[5] != std::byte{0} || bytes[6] != std::byte{0} || bytes[7] != std::byte{0}) {
    return absl::InvalidArgumentError("remote region descriptor with reserved bytes set");
  }
  RemoteRegion region;
  region.address = GetUint64(bytes.data() + 8);
  region.length = GetUint64(bytes.data() + 16);
  region.key = GetUint64(bytes.data() + 24);
  if (region.length > UINT64_MAX - region.address) {
    return absl::InvalidArgumentError("remote region descriptor whose region passes 2^64");
  }
  return region;
}

std::unique_ptr<PostedSend> Endpoint::PostSend(const std::string& peer, const Tag& tag,
                                               const RegionSlice& slice, absl::Time deadline) {
  absl::StatusOr<ByteSpan> bytes = HostRegionBytes(peer, slice);
  if (!bytes.ok()) return CompletedSend(bytes.status());
  return CompletedSend(Send(peer, tag, *bytes, deadline));
}

std::unique_ptr<ExposedRegion> Endpoint::ExposeRegion(const std::string& peer, uint64_t,
                                                      const RegionSlice&, absl::Time) {
  return FailedExposure(absl::UnimplementedError(
      absl::StrCat("this transport does not take one-sided writes (from peer ", peer, ")")));
}

std::unique_ptr<PostedSend> Endpoint::PostWrite(const std::string& peer, uint64_t,
                                                const RegionSlice&, const RemoteRegion&, size_t,
                                                std::optional<uint32_t>, absl::Time) {
  return CompletedSend(absl::UnimplementedError(
      absl::StrCat("this transport does not write one-sided (to peer ", peer, ")")));
}

absl::StatusOr<std::string> Endpoint::ConnectionData(const std::string&) { return std::string(); }

absl::Status Endpoint::Connect(const std::string& peer, std::string_view remote_data) {
  if (remote_data.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("this transport exchanges no connection data, but was given ",
                   remote_data.size(), " bytes of it for peer ", peer));
}

std::unique_ptr<PostedRecv> Endpoint::PostRecvRegion(const std::string& peer, const Tag& tag,
                                                     const RegionSlice& slice, absl::Time deadline,
                                                     ArrivalCallback on_arrival) {
  absl::StatusOr<ByteSpan> bytes = HostRegionBytes(peer, slice);
  if (!bytes.ok()) return FailedRecv(bytes.status());
  return PostRecv(peer, tag, *bytes, deadline, std::move(on_arrival));
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> Endpoint::RegisterMemory(ByteSpan bytes,
                                                                       MemoryKind kind) {
  if (kind != MemoryKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat("the endpoint at ", address(), " cannot move ",
                                                   MemoryKindName(kind), " memory"));
  }
  return HostMemoryRegion(bytes);
}

bool Endpoint::MovesDirectly(const std::string& /*peer*/, MemoryKind kind) const {
  return kind == MemoryKind::kHost;
}

const TransportAddress* PeerInfo::Find(std::string_view name) const {
  for (const TransportAddress& transport : transports) {
    if (transport.transport == name) return &transport;
  }
  return nullptr;
}

}  // namespace baton::transport
