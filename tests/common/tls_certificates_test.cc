// The certificate checks a daemon runs on its own TLS files at start, and the development CA.

#include "common/tls_certificates.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

class TlsCertificatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DevCertificateAuthority> ca = DevCertificateAuthority::Create("test CA");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_.emplace(std::move(*ca));
  }

  KeyAndCertificate Issue(const std::string& name, absl::Duration validity = absl::Hours(1)) {
    absl::StatusOr<KeyAndCertificate> issued = ca_->Issue(name, validity);
    EXPECT_TRUE(issued.ok()) << issued.status();
    return issued.ok() ? *issued : KeyAndCertificate{};
  }

  std::optional<DevCertificateAuthority> ca_;
};

TEST_F(TlsCertificatesTest, AnIssuedCertificateNamesItsNodeAndVerifies) {
  const KeyAndCertificate node = Issue("node-7");
  absl::StatusOr<std::vector<std::string>> names = CertificateNames(node.certificate_pem);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, std::vector<std::string>{"node-7"});  // CN and SAN, once
  EXPECT_TRUE(CheckNodeCertificate(node, ca_->certificate_pem(), "node-7").ok());
  // A bundle of several CAs works as long as one signed it.
  absl::StatusOr<DevCertificateAuthority> other = DevCertificateAuthority::Create("other CA");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(
      CheckNodeCertificate(node, other->certificate_pem() + ca_->certificate_pem(), "node-7").ok());
}

TEST_F(TlsCertificatesTest, EachWayAConfigurationCanBeWrongIsNamed) {
  const KeyAndCertificate node = Issue("node-7");
  const KeyAndCertificate neighbour = Issue("node-8");
  absl::StatusOr<DevCertificateAuthority> other = DevCertificateAuthority::Create("other CA");
  ASSERT_TRUE(other.ok());
  struct Case {
    KeyAndCertificate identity;
    std::string ca;
    std::string node_name;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {node, ca_->certificate_pem(), "node-8",
       "the certificate names node-7 but this daemon's node name is node-8"},
      {{neighbour.key_pem, node.certificate_pem},
       ca_->certificate_pem(),
       "node-7",
       "the private key does not belong to the certificate"},
      {node, other->certificate_pem(), "node-7", "does not verify against the CA bundle"},
      {Issue("node-7", -absl::Hours(2)), ca_->certificate_pem(), "node-7", "expired"},
      {{node.key_pem, "not a certificate"},
       ca_->certificate_pem(),
       "node-7",
       "holds no certificate"},
      {{"", node.certificate_pem}, ca_->certificate_pem(), "node-7", "no unencrypted PEM"},
      {node, "", "node-7", "the CA bundle holds no certificate"},
  };
  for (const Case& c : cases) {
    absl::Status status = CheckNodeCertificate(c.identity, c.ca, c.node_name);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status;
  }
}

TEST_F(TlsCertificatesTest, ACaCertificateIsNotANodeCertificate) {
  // The CA's own certificate lacks the TLS usages (and the test has no key for it anyway).
  absl::StatusOr<std::vector<std::string>> names = CertificateNames(ca_->certificate_pem());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"test CA"});
  EXPECT_FALSE(CertificateNames("").ok());
}

}  // namespace
}  // namespace baton
