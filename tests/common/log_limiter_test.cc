#include "common/log_limiter.h"

#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"

namespace baton {
namespace {

TEST(LogLimiterTest, LetsTheFirstLinesOfEachIntervalThroughAndCountsTheRest) {
  LogLimiter limiter(2, absl::Seconds(1));
  const absl::Time start = absl::FromUnixSeconds(1000);
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(start, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_TRUE(limiter.Allow(start + absl::Milliseconds(10), &suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(limiter.Allow(start + absl::Milliseconds(20 + i % 900), &suppressed));
  }
  // The next interval's first line carries the count of what was left out.
  EXPECT_TRUE(limiter.Allow(start + absl::Seconds(1), &suppressed));
  EXPECT_EQ(suppressed, 1000u);
  EXPECT_TRUE(limiter.Allow(start + absl::Seconds(1), &suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_FALSE(limiter.Allow(start + absl::Milliseconds(1500), &suppressed));
}

TEST(LogLimiterTest, AFloodFromManyThreadsWritesABoundedLog) {
  std::ostringstream out;
  auto logger = std::make_shared<spdlog::logger>(
      "limited", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  // An interval no test run outlasts: only the first window's lines get through.
  LogLimiter limiter(5, absl::Hours(1));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&limiter, t] {
      for (int i = 0; i < 10000; ++i) limiter.Log(spdlog::level::warn, "refused {} {}", t, i);
    });
  }
  for (std::thread& thread : threads) thread.join();
  spdlog::set_default_logger(previous);
  const std::string text = out.str();
  size_t lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  EXPECT_EQ(lines, 5u) << text;
  EXPECT_EQ(text.find("suppressed"), std::string::npos) << text;
}

TEST(LogLimiterTest, TheLineAfterAGapSaysHowManyWereSuppressed) {
  std::ostringstream out;
  auto logger = std::make_shared<spdlog::logger>(
      "limited", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  LogLimiter limiter(1, absl::Minutes(1));
  const absl::Time start = absl::FromUnixSeconds(0);
  limiter.LogAt(start, spdlog::level::warn, "refused {}", 0);
  for (int i = 1; i <= 7; ++i) {
    limiter.LogAt(start + absl::Seconds(i), spdlog::level::warn, "refused {}", i);
  }
  limiter.LogAt(start + absl::Minutes(1), spdlog::level::warn, "refused {}", 8);
  // Below the logger's level nothing is written, and nothing is counted as suppressed.
  logger->set_level(spdlog::level::err);
  limiter.LogAt(start + absl::Minutes(2), spdlog::level::warn, "refused {}", 9);
  logger->set_level(spdlog::level::info);
  limiter.LogAt(start + absl::Minutes(2), spdlog::level::warn, "refused {}", 10);
  spdlog::set_default_logger(previous);
  const std::string text = out.str();
  EXPECT_NE(text.find("refused 0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("refused 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("refused 8 (7 more like it suppressed)\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("refused 9\n"), std::string::npos) << text;
  EXPECT_NE(text.find("refused 10\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace baton
