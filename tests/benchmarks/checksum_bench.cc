// What payload checksums cost (TcpOptions::checksum, batond's data_checksum): CRC32C throughput of
// the hardware and the portable implementation, in cache and not, and a TCP loopback transfer
// between two endpoints of this process with checksums off and on, taking turns so that both see
// the same machine. Prints one line per measurement; docs/bench/2026-12-02-checksum.md has a run.
//
//   checksum_bench [--bytes=67108864] [--iterations=15]

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "transport/crc32c.h"
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

struct Pair {
  std::unique_ptr<Endpoint> sender;
  std::unique_ptr<Endpoint> receiver;
};

Pair NewPair(bool checksum) {
  TcpOptions options;
  options.listen_address = "127.0.0.1:0";
  options.checksum = checksum;
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

  // Both pairs connected and warmed up first; then they take turns, off before on.
  Pair off = NewPair(false);
  Pair on = NewPair(true);
  std::vector<std::byte> into(bytes);
  uint64_t seq = 0;
  Transfer(off, ++seq, data, into);
  Transfer(on, ++seq, data, into);
  std::vector<double> off_seconds;
  std::vector<double> on_seconds;
  std::vector<double> ratios;
  for (size_t i = 0; i < iterations; ++i) {
    off_seconds.push_back(Transfer(off, ++seq, data, into));
    on_seconds.push_back(Transfer(on, ++seq, data, into));
    ratios.push_back(on_seconds.back() / off_seconds.back());
  }
  if (!std::equal(into.begin(), into.end(), data.begin())) {
    std::fprintf(stderr, "received bytes differ from the sent ones\n");
    return 1;
  }
  const double off_median = Median(off_seconds);
  const double on_median = Median(on_seconds);
  std::printf("tcp loopback %zu MiB, %zu turns: checksum off median %.2f ms (%.2f GB/s)\n",
              bytes >> 20, iterations, off_median * 1e3,
              static_cast<double>(bytes) / off_median / 1e9);
  std::printf("tcp loopback %zu MiB, %zu turns: checksum on  median %.2f ms (%.2f GB/s)\n",
              bytes >> 20, iterations, on_median * 1e3,
              static_cast<double>(bytes) / on_median / 1e9);
  std::printf("on/off time: %.3f (ratio of medians), %.3f (median of the turns' ratios)\n",
              on_median / off_median, Median(ratios));
  return 0;
}

}  // namespace
}  // namespace baton::transport

int main(int argc, char** argv) { return baton::transport::Main(argc, argv); }
