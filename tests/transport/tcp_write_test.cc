// One-sided writes on the TCP data plane as a peer puts them on the wire (frame.h: two write
// frames, then the receiver's write ack): what the receiver answers, and that a write that breaks
// the protocol or arrives corrupt fails the exposure, closes the connection and writes nothing.
// The Endpoint contract itself is tested by transport_conformance_test.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/raw_tcp_peer.h"
#include "transport/exposure_table.h"
#include "transport/tcp/crc32c.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/remote_write.h"
#include "transport/tcp/tcp_transport.h"

namespace baton::transport {
namespace {

using tcp::WriteAck;
using tcp::WriteDescriptor;
using ::testing::HasSubstr;

constexpr uint64_t kComm = 0x5151;

class TcpWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TcpOptions options;
    options.listen_address = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = NewTcpEndpoint(options);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *std::move(endpoint);
    raw_ = RawConnect(endpoint_->address());
    WriteHello(raw_.get(), kPeer);
  }

  // The write's two frames, as a writer sends them; `checksum`: with a CRC32C trailer each.
  void WriteWrite(uint64_t id, const WriteDescriptor& descriptor, ConstByteSpan bytes,
                  bool checksum = false) {
    const std::array<std::byte, kWriteDescriptorBytes> encoded = descriptor.Encode();
    Send(FrameHeader{FrameType::kWrite, Tag{.comm = kComm, .seq = id, .step = 0}, encoded.size(),
                     checksum},
         encoded, checksum ? Crc32c(0, encoded) : 0);
    Send(FrameHeader{FrameType::kWrite, Tag{.comm = kComm, .seq = id, .step = 1}, bytes.size(),
                     checksum},
         bytes, checksum ? Crc32c(0, bytes) : 0);
  }
  void Send(const FrameHeader& header, ConstByteSpan payload, uint32_t crc) {
    WriteFrame(raw_.get(), header, payload);
    if (header.checksum) {
      std::array<std::byte, kFrameChecksumBytes> trailer;
      EncodeFrameChecksum(crc, trailer);
      WriteRaw(raw_.get(), trailer);
    }
  }
  // The next write ack the endpoint sends back.
  WriteAck ReadAck() {
    const FrameHeader header = ReadHeader(raw_.get());
    EXPECT_EQ(header.type, FrameType::kWriteAck);
    std::array<std::byte, kWriteAckPayloadBytes> payload;
    size_t read = 0;
    EXPECT_TRUE(ReadFull(raw_.get(), payload, Deadline(absl::Seconds(10)), &read).ok());
    absl::StatusOr<WriteAck> ack = WriteAck::Decode(payload);
    EXPECT_TRUE(ack.ok()) << ack.status();
    return ack.ok() ? *ack : WriteAck{};
  }

  static constexpr char kPeer[] = "raw-writer:1";
  std::unique_ptr<Endpoint> endpoint_;
  FileDescriptor raw_;
};

TEST_F(TcpWriteTest, WritesLandInTheRegionAndAreAnsweredTakenOrRefused) {
  std::vector<std::byte> memory(1000);
  const std::unique_ptr<MemoryRegion> region = HostMemoryRegion(memory);
  std::unique_ptr<ExposedRegion> exposed =
      endpoint_->ExposeRegion(kPeer, kComm, RegionSlice{region.get(), 100, 800}, Deadline());
  const uint64_t key = exposed->descriptor().key;
  const std::vector<std::byte> first = Pattern(300, 1);
  const std::vector<std::byte> second = Pattern(500, 2);
  WriteWrite(1, WriteDescriptor{key, 0, first.size(), std::nullopt}, first);
  EXPECT_EQ(ReadAck().refusal, WriteRefusal::kNone);
  // Out of bounds: refused and answered so; the region stays open.
  WriteWrite(2, WriteDescriptor{key, 700, 200, std::nullopt}, Pattern(200, 3));
  const WriteAck outside = ReadAck();
  EXPECT_EQ(outside.write, 2u);
  EXPECT_EQ(outside.refusal, WriteRefusal::kOutOfBounds);
  EXPECT_FALSE(exposed->Test());
  WriteWrite(3, WriteDescriptor{key, 300, second.size(), ExposureTable::Notify{77, 800}}, second);
  EXPECT_EQ(ReadAck().refusal, WriteRefusal::kNone);
  absl::StatusOr<WriteNotice> notice = exposed->Wait();
  ASSERT_TRUE(notice.ok()) << notice.status();
  EXPECT_EQ(*notice, (WriteNotice{77, 800}));
  EXPECT_TRUE(std::equal(first.begin(), first.end(), memory.begin() + 100));
  EXPECT_TRUE(std::equal(second.begin(), second.end(), memory.begin() + 400));
  EXPECT_EQ(memory[99], std::byte{0});
  EXPECT_EQ(memory[900], std::byte{0});
  // Completed: the key is spent.
  WriteWrite(4, WriteDescriptor{key, 0, 8, std::nullopt}, Pattern(8, 4));
  EXPECT_EQ(ReadAck().refusal, WriteRefusal::kNoRegion);
  // A guessed key: the same answer.
  WriteWrite(5, WriteDescriptor{key + 1, 0, 8, std::nullopt}, Pattern(8, 5));
  EXPECT_EQ(ReadAck().refusal, WriteRefusal::kNoRegion);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), memory.begin() + 100));
  const LinkStats link = StatsFor(*endpoint_, kPeer);
  EXPECT_EQ(link.Counter(kRefusedWritesCounter), 3u);
  EXPECT_EQ(link.rx_messages, 2u);
  EXPECT_EQ(link.rx_bytes, 800 + 2 * kWriteOverheadBytes);
}

// A descriptor altered on the way fails its checksum before the receiver acts on it: nothing is
// written, the exposure fails with DataLoss naming the peer, and the connection closes.
TEST_F(TcpWriteTest, ACorruptedDescriptorWritesNothingAndFailsTheExposure) {
  std::vector<std::byte> memory(64);
  const std::unique_ptr<MemoryRegion> region = HostMemoryRegion(memory);
  std::unique_ptr<ExposedRegion> exposed =
      endpoint_->ExposeRegion(kPeer, kComm, RegionSlice{region.get(), 0, 64}, Deadline());
  const WriteDescriptor descriptor{exposed->descriptor().key, 0, 64, ExposureTable::Notify{1, 64}};
  std::array<std::byte, kWriteDescriptorBytes> encoded = descriptor.Encode();
  const uint32_t crc = Crc32c(0, encoded);
  encoded[8] ^= std::byte{0x20};  // the offset, flipped after the sender's CRC
  Send(FrameHeader{FrameType::kWrite, Tag{.comm = kComm, .seq = 1}, encoded.size(), true}, encoded,
       crc);
  const std::vector<std::byte> bytes = Pattern(64, 1);
  Send(FrameHeader{FrameType::kWrite, Tag{.comm = kComm, .seq = 1, .step = 1}, bytes.size(), true},
       bytes, Crc32c(0, bytes));
  const absl::StatusOr<WriteNotice> notice = exposed->Wait();
  EXPECT_EQ(notice.status().code(), absl::StatusCode::kDataLoss) << notice.status();
  EXPECT_THAT(notice.status().message(), HasSubstr(kPeer));
  EXPECT_TRUE(ClosedWithin(raw_.get(), absl::Seconds(10)));
  EXPECT_EQ(memory, std::vector<std::byte>(64));
  EXPECT_EQ(StatsFor(*endpoint_, kPeer).Counter(kChecksumFailuresCounter), 1u);
}

// Bytes without their descriptor, or a descriptor with flags this build does not know, break the
// protocol: the connection closes and the exposures of the peer fail.
TEST_F(TcpWriteTest, AWriteThatBreaksTheProtocolClosesTheConnection) {
  std::vector<std::byte> memory(64);
  const std::unique_ptr<MemoryRegion> region = HostMemoryRegion(memory);
  std::unique_ptr<ExposedRegion> exposed =
      endpoint_->ExposeRegion(kPeer, kComm, RegionSlice{region.get(), 0, 64}, Deadline());
  const std::vector<std::byte> bytes = Pattern(64, 1);
  Send(FrameHeader{FrameType::kWrite, Tag{.comm = kComm, .seq = 1, .step = 1}, bytes.size()}, bytes,
       0);
  EXPECT_TRUE(ClosedWithin(raw_.get(), absl::Seconds(10)));
  const absl::StatusOr<WriteNotice> notice = exposed->Wait();
  EXPECT_FALSE(notice.ok());
  EXPECT_THAT(notice.status().message(), HasSubstr(kPeer));
  EXPECT_EQ(memory, std::vector<std::byte>(64));

  std::array<std::byte, kWriteDescriptorBytes> flagged =
      WriteDescriptor{1, 0, 0, std::nullopt}.Encode();
  flagged[37] = std::byte{0x01};  // an unknown flag bit
  EXPECT_EQ(WriteDescriptor::Decode(flagged).status().code(), absl::StatusCode::kDataLoss);
  std::array<std::byte, kWriteAckPayloadBytes> ack = WriteAck{1, WriteRefusal::kNone}.Encode();
  ack[8] = std::byte{9};
  EXPECT_EQ(WriteAck::Decode(ack).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace baton::transport
