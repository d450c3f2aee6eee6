#include "common/options.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace baton {
namespace {

struct Settings {
  std::string socket = "/run/default.sock";
  int64_t count = 1;
  bool verbose = false;
  absl::Duration timeout = absl::Seconds(60);
};

OptionSet MakeOptions(Settings& s) {
  OptionSet options;
  options.AddString("socket", &s.socket, "socket");
  options.AddInt("chunk_count", &s.count, "count");
  options.AddBool("verbose", &s.verbose, "verbose");
  options.AddDuration("op_timeout", &s.timeout, "timeout");
  return options;
}

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/baton-options-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(OptionsTest, FlagsInBothFormsAndDashOrUnderscore) {
  Settings s;
  OptionSet options = MakeOptions(s);
  const char* argv[] = {"prog",      "--socket=/tmp/a.sock", "--chunk-count", "7",
                        "--verbose", "--op_timeout=250ms",   "extra"};
  absl::StatusOr<std::vector<std::string>> positional = options.ParseFlags(7, argv);
  ASSERT_TRUE(positional.ok()) << positional.status();
  EXPECT_EQ(s.socket, "/tmp/a.sock");
  EXPECT_EQ(s.count, 7);
  EXPECT_TRUE(s.verbose);
  EXPECT_EQ(s.timeout, absl::Milliseconds(250));
  EXPECT_EQ(*positional, std::vector<std::string>{"extra"});
}

TEST(OptionsTest, UnknownFlagAndBadValuesAreErrors) {
  Settings s;
  OptionSet options = MakeOptions(s);
  const char* unknown[] = {"prog", "--nope=1"};
  EXPECT_EQ(options.ParseFlags(2, unknown).status().code(), absl::StatusCode::kInvalidArgument);
  const char* bad_int[] = {"prog", "--chunk-count=seven"};
  absl::Status status = options.ParseFlags(2, bad_int).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("seven"), std::string::npos) << status;
  const char* missing[] = {"prog", "--socket"};
  EXPECT_FALSE(options.ParseFlags(2, missing).ok());
  const char* bad_duration[] = {"prog", "--op-timeout=soon"};
  EXPECT_FALSE(options.ParseFlags(2, bad_duration).ok());
  EXPECT_EQ(s.count, 1) << "a failed parse must not change the value";
}

TEST(OptionsTest, ConfigFileWithCommentsQuotesAndLineNumbers) {
  Settings s;
  OptionSet options = MakeOptions(s);
  const std::string path = WriteTemp(
      "# batond config\n\nsocket = \"/tmp/b.sock\"  # trailing comment\nchunk-count=3\n"
      "op_timeout = 5s\n");
  ASSERT_TRUE(options.ParseConfigFile(path).ok());
  EXPECT_EQ(s.socket, "/tmp/b.sock");
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.timeout, absl::Seconds(5));
  std::remove(path.c_str());

  const std::string bad = WriteTemp("socket = /x\nthis line is wrong\n");
  absl::Status status = options.ParseConfigFile(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(":2:"), std::string::npos) << status;
  std::remove(bad.c_str());

  EXPECT_EQ(options.ParseConfigFile("/nonexistent/batond.conf").code(),
            absl::StatusCode::kNotFound);
}

TEST(OptionsTest, HelpListsEveryOptionWithItsDefault) {
  Settings s;
  OptionSet options = MakeOptions(s);
  const std::string help = options.Help();
  EXPECT_NE(help.find("--socket=/run/default.sock"), std::string::npos) << help;
  EXPECT_NE(help.find("--chunk-count=1"), std::string::npos) << help;
  EXPECT_NE(help.find("--op-timeout=1m"), std::string::npos) << help;
  const char* argv[] = {"prog", "--socket=x", "--help"};
  EXPECT_TRUE(WantsHelp(3, argv));
  const char* after_dashes[] = {"prog", "--", "--help"};
  EXPECT_FALSE(WantsHelp(3, after_dashes));
}

}  // namespace
}  // namespace baton
