#pragma once

// The payloads of the TCP transport's write frames (frame.h): a one-sided write's descriptor,
// which precedes its bytes, and the receiver's answer. Internal to transport/tcp/. Every integer
// is little-endian on the wire.
//
//   descriptor (kWriteDescriptorBytes)       write ack (kWriteAckPayloadBytes)
//   offset size field                        offset size field
//        0    8 key (RemoteRegion::key)           0    8 the write's identifier (its tag's seq)
//        8    8 offset into the region            8    4 WriteRefusal: 0 taken, 1 no such
//       16    8 length (the bytes that follow)            region, 2 out of its bounds
//       24    8 total: with the notify flag, the 12    4 zero
//                bytes the writer wrote into the
//                region in all (WriteTally); else 0
//       32    4 immediate (with the notify flag)
//       36    4 flags: bit 0 notify; others zero

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "transport/exposure_table.h"
#include "transport/tcp/frame.h"

namespace baton::transport::tcp {

struct WriteDescriptor {
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::optional<ExposureTable::Notify> notify;

  std::array<std::byte, kWriteDescriptorBytes> Encode() const;
  // DataLoss when a flag other than notify is set, the length is more than a frame may carry, or
  // a write that does not notify says a total or immediate.
  static absl::StatusOr<WriteDescriptor> Decode(
      std::span<const std::byte, kWriteDescriptorBytes> in);
};

struct WriteAck {
  uint64_t write = 0;
  WriteRefusal refusal = WriteRefusal::kNone;

  std::array<std::byte, kWriteAckPayloadBytes> Encode() const;
  // DataLoss for a refusal this build does not know, or reserved bytes set.
  static absl::StatusOr<WriteAck> Decode(std::span<const std::byte, kWriteAckPayloadBytes> in);
};

}  // namespace baton::transport::tcp
