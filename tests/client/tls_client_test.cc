// The client library over mutual TLS (design.md §10), with and without
// coalescing onto Stream batches, against a server requiring client
// certificates of its CA, and with a bearer token against a server that
// authenticates callers by token. Certificates are made by openssl at test
// time.
#include <fstream>

#include "absl/strings/str_cat.h"
#include "dedup/client/client.h"
#include "dedup/client/tls.h"
#include "gtest/gtest.h"
#include "server/authorization.h"
#include "tests/server/test_certs.h"
#include "tests/server/test_server.h"

namespace dedup::client {
namespace {

using server::test::TestCerts;
using server::test::TestServer;

// One Claim of "orders"/"o-1" by a new Client of `server` with
// `credentials` (or their error), coalescing or not.
absl::StatusOr<v1::ClaimResponse> ClaimThrough(
    TestServer& server,
    const absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>& credentials, bool coalesce) {
  if (!credentials.ok()) return credentials.status();
  ClientOptions options;
  options.endpoint = absl::StrCat("127.0.0.1:", server.server().port());
  options.credentials = *credentials;
  options.coalesce = coalesce;
  options.default_timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) return client.status();
  v1::ClaimRequest claim;
  claim.set_namespace_("orders");
  claim.set_key("o-1");
  claim.set_owner("worker-a");
  return (*client)->Claim(claim);
}

class TlsClientTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto server = TestServer::Start(
        absl::StrCat("durability: 'buffered' ", certs_.ServerTlsConfig()), nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  absl::StatusOr<v1::ClaimResponse> ClaimWith(const TlsFiles& files) {
    return ClaimThrough(*server_, TlsCredentials(files), GetParam());
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

// A server with server-side TLS that knows one bearer token, for
// "spiffe://test/worker-a", granted claim on "orders".
class BearerClientTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    token_file_ = certs_.dir() + "/token";
    std::ofstream(token_file_) << "tok-5e1f0a9c3d7b42e8\n";
    const std::string tokens = certs_.dir() + "/tokens";
    std::ofstream(tokens) << "spiffe://test/worker-a sha256:"
                          << server::Sha256Hex("tok-5e1f0a9c3d7b42e8") << "\n";
    auto server = TestServer::Start(
        absl::StrCat("durability: 'buffered' tls { cert: '", certs_.Pem("server"), "' key: '",
                     certs_.Key("server"), "' } auth { tokens_file: '", tokens,
                     "' grants { identity: 'spiffe://test/worker-a' namespaces: 'orders' "
                     "roles: 'claim' } }"),
        nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  absl::StatusOr<v1::ClaimResponse> ClaimWith(const std::string& token_file) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        TlsCredentials({certs_.Pem("ca"), "", ""});
    if (credentials.ok() && !token_file.empty()) {
      credentials = WithBearerTokenFile(*credentials, token_file);
    }
    return ClaimThrough(*server_, credentials, GetParam());
  }

  TestCerts certs_;
  std::string token_file_;
  std::unique_ptr<TestServer> server_;
};

TEST_P(BearerClientTest, AClientWithTheTokenClaims) {
  absl::StatusOr<v1::ClaimResponse> claimed = ClaimWith(token_file_);

  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
}

TEST_P(BearerClientTest, AClientWithoutATokenIsUnauthenticated) {
  absl::StatusOr<v1::ClaimResponse> claimed = ClaimWith("");

  EXPECT_EQ(claimed.status().code(), absl::StatusCode::kUnauthenticated) << claimed.status();
}

TEST_P(BearerClientTest, AnUnreadableOrEmptyTokenFileIsNamed) {
  absl::StatusOr<v1::ClaimResponse> missing = ClaimWith(certs_.dir() + "/no-token");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("no-token"), std::string::npos);
  std::ofstream(token_file_) << "\nsecond line\n";
  EXPECT_EQ(ClaimWith(token_file_).status().code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Coalescing, BearerClientTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Coalesced" : "Unary"; });

}  // namespace
}  // namespace dedup::client
