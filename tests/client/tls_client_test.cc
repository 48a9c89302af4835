// The client library over mutual TLS (design.md §10), with and without
// coalescing onto Stream batches, against a server requiring client
// certificates of its CA. Certificates are made by openssl at test time.
#include "absl/strings/str_cat.h"
#include "dedup/client/client.h"
#include "dedup/client/tls.h"
#include "gtest/gtest.h"
#include "tests/server/test_certs.h"
#include "tests/server/test_server.h"

namespace dedup::client {
namespace {

using server::test::TestCerts;
using server::test::TestServer;

class TlsClientTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto server = TestServer::Start(
        absl::StrCat("durability: 'buffered' ", certs_.ServerTlsConfig()), nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  absl::StatusOr<v1::ClaimResponse> ClaimWith(const TlsFiles& files) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = TlsCredentials(files);
    if (!credentials.ok()) return credentials.status();
    ClientOptions options;
    options.endpoint = absl::StrCat("127.0.0.1:", server_->server().port());
    options.credentials = *credentials;
    options.coalesce = GetParam();
    options.default_timeout = absl::Seconds(2);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    if (!client.ok()) return client.status();
    v1::ClaimRequest claim;
    claim.set_namespace_("orders");
    claim.set_key("o-1");
    claim.set_owner("worker-a");
    return (*client)->Claim(claim);
  }

  TestCerts certs_;
  std::unique_ptr<TestServer> server_;
};

TEST_P(TlsClientTest, AClientWithACertificateOfTheServersCaClaims) {
  absl::StatusOr<v1::ClaimResponse> claimed =
      ClaimWith({certs_.Pem("ca"), certs_.Pem("client"), certs_.Key("client")});

  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
}

TEST_P(TlsClientTest, AClientWithoutACertificateIsRefused) {
  absl::StatusOr<v1::ClaimResponse> claimed = ClaimWith({certs_.Pem("ca"), "", ""});

  EXPECT_FALSE(claimed.ok());
}

TEST_P(TlsClientTest, BadFilesAreNamed) {
  EXPECT_EQ(TlsCredentials({"", certs_.Pem("client"), ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> missing =
      TlsCredentials({certs_.dir() + "/missing.pem", "", ""});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("missing.pem"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Coalescing, TlsClientTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Coalesced" : "Unary"; });

}  // namespace
}  // namespace dedup::client
