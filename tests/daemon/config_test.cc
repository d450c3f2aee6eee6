#include "daemon/config.h"

#include <string>
#include <utility>
#include <vector>

#include "common/options.h"
#include "gtest/gtest.h"

namespace baton::daemon {
namespace {

absl::Status Configure(Config& config, const std::string& name, const std::string& value) {
  OptionSet options;
  RegisterOptions(options, config);
  if (absl::Status set = options.Set(name, value); !set.ok()) return set;
  return FinalizeConfig(config);
}

TEST(ConfigTest, TheSpinsAreSetByFlagAndBoundedToAMillisecond) {
  for (const std::string name : {"submit-spin", "receive_spin"}) {
    Config config;
    ASSERT_TRUE(Configure(config, name, "500us").ok()) << name;
    EXPECT_EQ(name == "submit-spin" ? config.submit_spin : config.receive_spin,
              absl::Microseconds(500));
    Config too_long;
    const absl::Status status = Configure(too_long, name, "2ms");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(status.message().find("between 0 and 1ms"), std::string::npos) << status;
    Config negative;  // the duration parser already refuses it
    EXPECT_EQ(Configure(negative, name, "-1us").code(), absl::StatusCode::kInvalidArgument);
  }
  Config defaults;
  ASSERT_TRUE(FinalizeConfig(defaults).ok());
  EXPECT_EQ(defaults.submit_spin, absl::Microseconds(20));
  EXPECT_EQ(defaults.receive_spin, absl::Microseconds(200));
}

TEST(ConfigTest, TcpStreamsAreOneToSixteen) {
  Config config;
  ASSERT_TRUE(Configure(config, "tcp_streams", "4").ok());
  EXPECT_EQ(config.tcp_streams, 4);
  for (const std::string bad : {"0", "17", "-1"}) {
    Config refused;
    const absl::Status status = Configure(refused, "tcp-streams", bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("between 1 and 16"), std::string::npos) << status;
  }
  Config defaults;
  ASSERT_TRUE(FinalizeConfig(defaults).ok());
  EXPECT_EQ(defaults.tcp_streams, 1);
}

TEST(ConfigTest, DataChecksumIsOffUnlessAsked) {
  Config defaults;
  ASSERT_TRUE(FinalizeConfig(defaults).ok());
  EXPECT_FALSE(defaults.data_checksum);
  for (const std::string name : {"data_checksum", "data-checksum"}) {
    Config config;
    ASSERT_TRUE(Configure(config, name, "true").ok()) << name;
    EXPECT_TRUE(config.data_checksum) << name;
  }
  Config refused;
  EXPECT_EQ(Configure(refused, "data_checksum", "sometimes").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, DataEncryptionIsOffUnlessAskedAndNeedsTls) {
  Config defaults;
  ASSERT_TRUE(FinalizeConfig(defaults).ok());
  EXPECT_FALSE(defaults.data_encryption);
  Config without_tls;
  const absl::Status refused = Configure(without_tls, "data-encryption", "true");
  EXPECT_TRUE(without_tls.data_encryption);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("needs tls_cert, tls_key and tls_ca"), std::string::npos)
      << refused;
  Config with_tls;
  OptionSet options;
  RegisterOptions(options, with_tls);
  for (const auto& [name, value] : {std::pair<std::string, std::string>{"data_encryption", "true"},
                                    {"tls_cert", "c.pem"},
                                    {"tls_key", "k.pem"},
                                    {"tls_ca", "ca.pem"}}) {
    ASSERT_TRUE(options.Set(name, value).ok()) << name;
  }
  EXPECT_TRUE(FinalizeConfig(with_tls).ok());
}

// A config with the three TLS files set (they are not read here), then `settings` applied.
absl::Status ConfigureWithTls(Config& config,
                              const std::vector<std::pair<std::string, std::string>>& settings) {
  OptionSet options;
  RegisterOptions(options, config);
  std::vector<std::pair<std::string, std::string>> all = {
      {"tls_cert", "c.pem"}, {"tls_key", "k.pem"}, {"tls_ca", "ca.pem"}};
  all.insert(all.end(), settings.begin(), settings.end());
  for (const auto& [name, value] : all) {
    if (absl::Status set = options.Set(name, value); !set.ok()) return set;
  }
  return FinalizeConfig(config);
}

// data_integrity is auto by default, which authenticates data connections exactly when the
// daemon has certificates (and so handshake keys worth the name); on needs them; off turns it
// off; nothing else is accepted.
TEST(ConfigTest, DataIntegrityIsOnByDefaultWithCertificatesOnly) {
  Config defaults;
  ASSERT_TRUE(FinalizeConfig(defaults).ok());
  EXPECT_EQ(defaults.data_integrity, "auto");
  EXPECT_FALSE(DataIntegrity(defaults)) << "development mode has no keys to authenticate with";

  Config with_tls;
  ASSERT_TRUE(ConfigureWithTls(with_tls, {}).ok());
  EXPECT_TRUE(DataIntegrity(with_tls));

  Config off;
  ASSERT_TRUE(ConfigureWithTls(off, {{"data-integrity", "off"}}).ok());
  EXPECT_FALSE(DataIntegrity(off));

  Config on;
  ASSERT_TRUE(ConfigureWithTls(on, {{"data_integrity", "on"}}).ok());
  EXPECT_TRUE(DataIntegrity(on));

  Config on_without_tls;
  const absl::Status refused = Configure(on_without_tls, "data_integrity", "on");
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("needs tls_cert, tls_key and tls_ca"), std::string::npos)
      << refused;

  Config off_without_tls;
  ASSERT_TRUE(Configure(off_without_tls, "data_integrity", "off").ok());
  EXPECT_FALSE(DataIntegrity(off_without_tls));

  for (const std::string bad : {"true", "yes", "", "AUTO"}) {
    Config config;
    const absl::Status status = Configure(config, "data_integrity", bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("auto, on or off"), std::string::npos) << status;
  }

  // data_encryption seals, which authenticates as well: it goes with any data_integrity.
  Config sealed;
  ASSERT_TRUE(
      ConfigureWithTls(sealed, {{"data_encryption", "true"}, {"data_integrity", "off"}}).ok());
  EXPECT_TRUE(sealed.data_encryption);
}

// The mapping limits default to values a job on one node stays below and that keep batond's
// address space and mapping count safe; each is bounded when set.
TEST(ConfigTest, MappingAndCommIdLimitsHaveSaneDefaultsAndBounds) {
  Config defaults;
  ASSERT_TRUE(FinalizeConfig(defaults).ok());
  EXPECT_EQ(defaults.max_buffers_per_uid, 8192);
  EXPECT_EQ(defaults.max_buffers, 32768);
  EXPECT_EQ(defaults.max_mapped_bytes_per_session, int64_t{2} << 40);
  EXPECT_EQ(defaults.max_mapped_bytes_per_uid, int64_t{4} << 40);
  EXPECT_EQ(defaults.max_mapped_bytes, int64_t{32} << 40);
  EXPECT_EQ(defaults.max_pending_comm_ids_per_uid, 1024);
  EXPECT_EQ(defaults.max_ranks_per_session, 512);
  EXPECT_EQ(defaults.max_ranks_per_uid, 2048);
  EXPECT_EQ(defaults.max_ranks, 8192);

  Config set;
  ASSERT_TRUE(Configure(set, "max-mapped-bytes-per-uid", "1073741824").ok());
  EXPECT_EQ(set.max_mapped_bytes_per_uid, int64_t{1} << 30);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"max_buffers_per_uid", "0"},
      {"max_buffers", "2000000"},
      {"max_mapped_bytes_per_session", "4096"},
      {"max_mapped_bytes_per_uid", "140737488355328"},  // 128 TiB
      {"max_mapped_bytes", "-1"},
      {"max_pending_comm_ids_per_uid", "0"},
      {"max_ranks_per_session", "0"},
      {"max_ranks_per_uid", "65537"},
      {"max_ranks", "-3"},
  };
  for (const auto& [name, value] : bad) {
    Config refused;
    const absl::Status status = Configure(refused, name, value);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name << "=" << value;
    EXPECT_NE(status.message().find(name), std::string::npos) << status;
  }
}

// The limits of one source stay under the global ones: a per-source limit above its global
// limit, or any limit out of range, is refused naming it.
TEST(ConfigTest, PerSourceLimitsAreAtMostTheirGlobalLimits) {
  Config defaults;
  ASSERT_TRUE(FinalizeConfig(defaults).ok());
  EXPECT_EQ(defaults.max_pending_data_handshakes, 256);
  EXPECT_EQ(defaults.max_pending_data_handshakes_per_source, 16);
  EXPECT_EQ(defaults.max_pending_sessions, 1024);
  EXPECT_EQ(defaults.max_pending_sessions_per_uid, 64);
  Config config;
  ASSERT_TRUE(Configure(config, "max-pending-sessions-per-uid", "1024").ok());
  EXPECT_EQ(config.max_pending_sessions_per_uid, 1024);
  for (const auto& [name, value] :
       {std::pair{"max_pending_sessions_per_uid", "1025"},
        std::pair{"max_pending_sessions_per_uid", "0"}, std::pair{"max_pending_sessions", "0"},
        std::pair{"max_pending_data_handshakes_per_source", "257"},
        std::pair{"max_pending_data_handshakes", "65537"}}) {
    Config refused;
    const absl::Status status = Configure(refused, name, value);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name << "=" << value;
    EXPECT_NE(status.message().find(name), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace baton::daemon
