// What protecting payloads costs on the TCP data plane: CRC32C checksums (TcpOptions::checksum,
// batond's data_checksum), authentication (TcpOptions::authenticate, batond's data_integrity) and
// sealing (TcpOptions::seal, batond's data_encryption). Throughput of CRC32C (hardware and
// portable), of AES-256-GCM (seal and open) and of GMAC (AES-256-GCM with the payload as
// associated data), in cache and not, then a TCP loopback transfer between two endpoints of this
// process plain, with checksums, authenticated and sealed, taking turns so that all see the same
// machine. Prints one line per measurement; docs/bench/2026-12-02-checksum.md,
// docs/bench/2026-12-02-sealing.md and docs/bench/2026-12-06-integrity.md have runs.
//
//   payload_protection_bench [--bytes=67108864] [--iterations=15]

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/aead.h"
#include "transport/tcp/crc32c.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace baton::transport {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// GB/s of `crc` over `data`, the best of 7 runs of enough calls to take about 50 ms.
double CrcThroughput(uint32_t (*crc)(uint32_t, std::span<const std::byte>),
                     std::span<const std::byte> data) {
  volatile uint32_t sink = 0;
  size_t calls = 1;
  for (;;) {  // calibrate
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < calls; ++i) sink = sink + crc(0, data);
    if (Seconds(Clock::now() - start) > 0.05) break;
    calls *= 2;
  }
  double best = 0;
  for (int run = 0; run < 7; ++run) {
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < calls; ++i) sink = sink + crc(0, data);
    best = std::max(best, static_cast<double>(calls * data.size()) / Seconds(Clock::now() - start));
  }
  return best / 1e9;
}

// GB/s of AES-256-GCM sealing or opening `data` in place in 256 KiB records (as a sealed
// connection does), or with `gmac` computing or checking their tags with the payload as
// associated data (as an authenticated connection does), the best of 7 runs of enough records to
// take about 50 ms.
double GcmThroughput(Aes256Gcm::Mode mode, std::span<std::byte> data, bool gmac) {
  absl::StatusOr<Aes256Gcm> gcm = Aes256Gcm::Create(AeadKey{}, mode);
  if (!gcm.ok()) {
    std::fprintf(stderr, "%s\n", gcm.status().ToString().c_str());
    std::exit(1);
  }
  constexpr size_t kRecord = size_t{256} << 10;
  const std::array<std::byte, 40> associated{};
  uint64_t number = 0;
  auto pass = [&] {
    for (size_t offset = 0; offset < data.size(); offset += kRecord) {
      const std::span<std::byte> record =
          data.subspan(offset, std::min(kRecord, data.size() - offset));
      AeadNonce nonce{};
      std::memcpy(nonce.data(), &++number, sizeof(number));
      gcm->Begin(nonce, associated);
      if (gmac) {
        gcm->Authenticate(record);
      } else {
        gcm->Update(record, record.data());
      }
      if (mode == Aes256Gcm::Mode::kSeal) {
        (void)gcm->Seal();
      } else {
        (void)gcm->Open(AeadTag{});  // fails, after the same work as a tag that matches
      }
    }
  };
  size_t passes = 1;
  for (;;) {  // calibrate
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < passes; ++i) pass();
    if (Seconds(Clock::now() - start) > 0.05) break;
    passes *= 2;
  }
  double best = 0;
  for (int run = 0; run < 7; ++run) {
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < passes; ++i) pass();
    best =
        std::max(best, static_cast<double>(passes * data.size()) / Seconds(Clock::now() - start));
  }
  return best / 1e9;
}

struct Pair {
  std::unique_ptr<Endpoint> sender;
  std::unique_ptr<Endpoint> receiver;
};

enum class Protection { kNone, kChecksum, kAuthenticate, kSeal };

Pair NewPair(Protection protection) {
  TcpOptions options;
  options.listen_address = "127.0.0.1:0";
  options.checksum = protection == Protection::kChecksum;
  options.authenticate = protection == Protection::kAuthenticate;
  options.seal = protection == Protection::kSeal;
  absl::StatusOr<std::unique_ptr<Endpoint>> sender = NewTcpEndpoint(options);
  absl::StatusOr<std::unique_ptr<Endpoint>> receiver = NewTcpEndpoint(options);
  if (!sender.ok() || !receiver.ok()) {
    std::fprintf(stderr, "cannot listen: %s %s\n", sender.status().ToString().c_str(),
                 receiver.status().ToString().c_str());
    std::exit(1);
  }
  return Pair{*std::move(sender), *std::move(receiver)};
}

// Seconds for one message of `data.size()` bytes from pair.sender to pair.receiver, the receive
// posted first (so the payload is read straight into its buffer, as a collective's chunks are).
double Transfer(Pair& pair, uint64_t seq, std::span<const std::byte> data,
                std::span<std::byte> into) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  const Tag tag{.comm = 1, .seq = seq};
  const Clock::time_point start = Clock::now();
  std::unique_ptr<PostedRecv> posted =
      pair.receiver->PostRecv(pair.sender->address(), tag, into, deadline, nullptr);
  absl::Status sent = pair.sender->Send(pair.receiver->address(), tag, data, deadline);
  absl::Status received = posted->Wait();
  const double seconds = Seconds(Clock::now() - start);
  if (!sent.ok() || !received.ok()) {
    std::fprintf(stderr, "transfer failed: %s %s\n", sent.ToString().c_str(),
                 received.ToString().c_str());
    std::exit(1);
  }
  return seconds;
}

// Microseconds per round trip of an 8-byte message (there and back), the median of `rounds`
// batches of 200.
double SmallRoundTrip(Pair& pair, uint64_t& seq, size_t rounds) {
  std::array<std::byte, 8> out{};
  std::array<std::byte, 8> in{};
  std::vector<double> batches;
  constexpr int kBatch = 200;
  for (size_t round = 0; round < rounds; ++round) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      const Tag there{.comm = 2, .seq = ++seq};
      const Tag back{.comm = 3, .seq = seq};
      if (!pair.sender->Send(pair.receiver->address(), there, out, deadline).ok() ||
          !pair.receiver->Recv(pair.sender->address(), there, in, deadline).ok() ||
          !pair.receiver->Send(pair.sender->address(), back, in, deadline).ok() ||
          !pair.sender->Recv(pair.receiver->address(), back, in, deadline).ok()) {
        std::fprintf(stderr, "small round trip failed\n");
        std::exit(1);
      }
    }
    batches.push_back(Seconds(Clock::now() - start) / kBatch * 1e6);
  }
  return Median(batches);
}

size_t Flag(int argc, char** argv, const char* name, size_t fallback) {
  const size_t length = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, length) == 0 && argv[i][length] == '=') {
      return std::strtoull(argv[i] + length + 1, nullptr, 10);
    }
  }
  return fallback;
}

int Main(int argc, char** argv) {
  const size_t bytes = Flag(argc, argv, "--bytes", size_t{64} << 20);
  const size_t iterations = std::max<size_t>(1, Flag(argc, argv, "--iterations", 15));
  std::vector<std::byte> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>((i * 2654435761u) >> 13);

  std::printf("crc32c: hardware (SSE4.2) %s\n", Crc32cHasHardware() ? "present" : "absent");
  const std::span<const std::byte> in_cache =
      std::span<const std::byte>(data).first(std::min<size_t>(bytes, size_t{256} << 10));
  const std::span<const std::byte> whole(data);
  struct Impl {
    const char* name;
    uint32_t (*crc)(uint32_t, std::span<const std::byte>);
  };
  std::vector<Impl> impls = {{"portable", &Crc32cPortable}};
  if (Crc32cHasHardware()) impls.insert(impls.begin(), Impl{"hardware", &Crc32cHardware});
  for (const Impl& impl : impls) {
    std::printf("crc32c %-8s %8zu KiB (in cache):   %6.2f GB/s\n", impl.name, in_cache.size() >> 10,
                CrcThroughput(impl.crc, in_cache));
    std::printf("crc32c %-8s %8zu KiB (from memory): %6.2f GB/s\n", impl.name, whole.size() >> 10,
                CrcThroughput(impl.crc, whole));
  }

  std::vector<std::byte> scratch(data.begin(), data.end());
  const std::span<std::byte> scratch_in_cache =
      std::span(scratch).first(std::min<size_t>(bytes, size_t{256} << 10));
  struct Cipher {
    const char* name;
    Aes256Gcm::Mode mode;
    bool gmac;
  };
  for (const Cipher& cipher : {Cipher{"gcm seal", Aes256Gcm::Mode::kSeal, false},
                               Cipher{"gcm open", Aes256Gcm::Mode::kOpen, false},
                               Cipher{"gmac tag", Aes256Gcm::Mode::kSeal, true},
                               Cipher{"gmac check", Aes256Gcm::Mode::kOpen, true}}) {
    std::printf("aes-256 %-10s %8zu KiB (in cache):   %6.2f GB/s\n", cipher.name,
                scratch_in_cache.size() >> 10,
                GcmThroughput(cipher.mode, scratch_in_cache, cipher.gmac));
    std::printf("aes-256 %-10s %8zu KiB (from memory): %6.2f GB/s\n", cipher.name,
                scratch.size() >> 10, GcmThroughput(cipher.mode, scratch, cipher.gmac));
  }

  // The three pairs connected and warmed up first; then they take turns, plain first.
  struct Variant {
    const char* name;
    Pair pair;
    std::vector<double> seconds;
    std::vector<double> ratios;  // to plain's time in the same turn
  };
  std::vector<Variant> variants;
  variants.push_back({"plain", NewPair(Protection::kNone), {}, {}});
  variants.push_back({"checksum", NewPair(Protection::kChecksum), {}, {}});
  variants.push_back({"authentic", NewPair(Protection::kAuthenticate), {}, {}});
  variants.push_back({"sealed", NewPair(Protection::kSeal), {}, {}});
  std::vector<std::byte> into(bytes);
  uint64_t seq = 0;
  for (Variant& variant : variants) Transfer(variant.pair, ++seq, data, into);
  for (size_t i = 0; i < iterations; ++i) {
    for (Variant& variant : variants) {
      std::fill(into.begin(), into.end(), std::byte{0});
      variant.seconds.push_back(Transfer(variant.pair, ++seq, data, into));
      variant.ratios.push_back(variant.seconds.back() / variants[0].seconds.back());
      if (!std::equal(into.begin(), into.end(), data.begin())) {
        std::fprintf(stderr, "%s: received bytes differ from the sent ones\n", variant.name);
        return 1;
      }
    }
  }
  const double plain_median = Median(variants[0].seconds);
  for (const Variant& variant : variants) {
    const double median = Median(variant.seconds);
    std::printf("tcp loopback %zu MiB, %zu turns: %-9s median %7.2f ms (%5.2f GB/s)", bytes >> 20,
                iterations, variant.name, median * 1e3, static_cast<double>(bytes) / median / 1e9);
    if (&variant != &variants[0]) {
      std::printf("  /plain: %.3f (ratio of medians), %.3f (median of the turns' ratios)",
                  median / plain_median, Median(variant.ratios));
    }
    std::printf("\n");
  }
  // Small messages: what a record adds per message (one 8-byte record each way), in turns.
  std::vector<std::vector<double>> small(variants.size());
  for (size_t i = 0; i < iterations; ++i) {
    for (size_t v = 0; v < variants.size(); ++v) {
      small[v].push_back(SmallRoundTrip(variants[v].pair, seq, 1));
    }
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    std::printf("tcp loopback 8 B round trip, %zu turns of 200: %-9s median %6.1f us\n", iterations,
                variants[v].name, Median(small[v]));
  }
  return 0;
}

}  // namespace
}  // namespace baton::transport

int main(int argc, char** argv) { return baton::transport::Main(argc, argv); }
