#pragma once

// Reading one frame's payload off a connection while checking it (frame.h): nothing to check, a
// CRC32C trailer after the payload (kFrameFlagChecksum), or sealed or authenticated records,
// each opened as soon as its tag has been read (kFrameFlagSealed, kFrameFlagAuthenticated), so
// that no consumer gets a byte of such a frame before the record it came in has opened, and a
// receive into a buffer fails if one does not. Internal to transport/tcp/.

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/aead.h"
#include "transport/auth/record_cipher.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/socket.h"
#include "transport/transport.h"

namespace baton::transport::tcp {

// OK if a frame with `header` may come on a connection whose cipher for what the peer sends is
// `open` (null: neither sealed nor authenticated): its protection must be the connection's.
// DataLoss otherwise (someone slipping a frame of their own in, or a peer that does not follow
// the handshake).
absl::Status FitsConnection(const FrameHeader& header, const RecordCipher* open);

class PayloadReader {
 public:
  // `in`, the header's frame's connection, positioned at the payload; `open`, that connection's
  // cipher for what the peer seals (null on a connection neither sealed nor authenticated). The
  // frame must fit the connection (FitsConnection; ReadFrame checks).
  PayloadReader(BufferedReader& in, const FrameHeader& header, RecordCipher* open);
  PayloadReader(const PayloadReader&) = delete;
  PayloadReader& operator=(const PayloadReader&) = delete;

  // Reads the payload's next into.size() bytes (at most left()) into `into`, with whatever falls
  // among them on the wire, opening records in place; adds the payload bytes read to
  // `*read`. Errors as BufferedReader::Read (`cancelled` may be null), and DataLoss when a
  // record does not open (intact() turns false; the connection is no longer usable).
  absl::Status Read(ByteSpan into, absl::Time deadline, const absl::FunctionRef<bool()>* cancelled,
                    size_t* read);
  // Once all of the payload has been read: reads what still follows it (a checksum trailer, the
  // rest of the last record's tag, or the record of an empty sealed payload). Errors as Read.
  absl::Status Finish(absl::Time deadline, const absl::FunctionRef<bool()>* cancelled);
  // Reads and drops the rest of a payload nobody wants, through `scratch` (not empty), then
  // Finish: the stream stays in step. Errors as Read.
  absl::Status Skip(ByteSpan scratch, absl::Time deadline);

  // Payload bytes not read yet.
  uint64_t left() const { return left_; }
  // False once the payload is known not to be what its sender sent: a record that did not open,
  // or (after Finish) a checksum that did not match.
  bool intact() const { return intact_; }

 private:
  absl::Status ReadFromSocket(ByteSpan into, absl::Time deadline,
                              const absl::FunctionRef<bool()>* cancelled, size_t* read);
  // Records: reads what is left of the current record's tag, then opens the record.
  absl::Status ReadTagAndOpen(absl::Time deadline, const absl::FunctionRef<bool()>* cancelled);

  BufferedReader& in_;
  const FrameHeader header_;
  RecordCipher* const open_;
  uint64_t left_;
  bool intact_ = true;
  // Checksum: the CRC32C so far and the trailer.
  uint32_t crc_ = 0;
  std::array<std::byte, kFrameChecksumBytes> trailer_{};
  size_t trailer_left_ = 0;
  // Records: the header (every record's associated data), the records begun, what is left of the
  // current one's payload bytes, and its tag.
  std::array<std::byte, kFrameHeaderBytes> associated_{};
  uint64_t records_begun_ = 0;
  size_t record_left_ = 0;
  AeadTag tag_{};
  size_t tag_left_ = 0;  // > 0 while the current record is begun and not yet opened
};

}  // namespace baton::transport::tcp
