// libFuzzer target: the data plane's frame header and the handshake payloads, as a peer (or
// anyone who reaches the data port) sends them. A header that decodes must encode back to the
// same 40 bytes; a hello that decodes must encode back to its payload.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "transport/auth/handshake.h"
#include "transport/tcp/frame.h"

namespace {

using baton::transport::kChallengePayloadBytes;
using baton::transport::kFrameHeaderBytes;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  if (input.size() < kFrameHeaderBytes) {
    (void)baton::transport::DecodeHello(input);
    return 0;
  }
  const auto header = input.first<kFrameHeaderBytes>();
  absl::StatusOr<baton::transport::FrameHeader> decoded =
      baton::transport::DecodeFrameHeader(header);
  if (!decoded.ok()) return 0;
  std::array<std::byte, kFrameHeaderBytes> again;
  baton::transport::EncodeFrameHeader(*decoded, again);
  Check(std::memcmp(again.data(), header.data(), kFrameHeaderBytes) == 0);
  const std::span<const std::byte> payload = input.subspan(kFrameHeaderBytes);
  if (payload.size() < decoded->payload_bytes) return 0;
  const auto exact = payload.first(decoded->payload_bytes);
  switch (decoded->type) {
    case baton::transport::FrameType::kHello: {
      absl::StatusOr<baton::transport::Hello> hello = baton::transport::DecodeHello(exact);
      Check(hello.ok());  // the header already bounded its size
      const std::string encoded = baton::transport::EncodeHello(*hello);
      Check(encoded.size() == exact.size() &&
            std::memcmp(encoded.data(), exact.data(), exact.size()) == 0);
      break;
    }
    case baton::transport::FrameType::kChallenge: {
      const baton::transport::Challenge challenge = baton::transport::DecodeChallenge(
          std::span<const std::byte, kChallengePayloadBytes>(exact));
      const auto encoded = baton::transport::EncodeChallenge(challenge);
      Check(std::memcmp(encoded.data(), exact.data(), kChallengePayloadBytes) == 0);
      break;
    }
    default:
      break;
  }
  return 0;
}
