// Transport security (design.md §10): mutual TLS with certificates made by
// openssl at test time. A client with a certificate of the configured CA
// is served; one without a certificate, with one of another CA, or in
// plaintext is refused; a rotated server certificate is picked up without
// a restart.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/auth_context.h"
#include "server/grpc_log.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/common/http_scrape.h"
#include "tests/server/test_certs.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "secure";

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string config = absl::StrCat("durability: 'buffered' ", certs_.ServerTlsConfig());
    absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(config, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // A stub over TLS trusting `ca`, presenting `client` (empty: none), on a
  // connection of its own.
  std::unique_ptr<v1::Dedup::Stub> StubWith(const std::string& ca, const std::string& client) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ReadFile(certs_.Pem(ca));
    if (!client.empty()) {
      options.pem_private_key = ReadFile(certs_.Key(client));
      options.pem_cert_chain = ReadFile(certs_.Pem(client));
    }
    grpc::ChannelArguments args;
    args.SetInt("dedup.test.connection", ++connections_);
    return v1::Dedup::NewStub(
        grpc::CreateCustomChannel(Target(), grpc::SslCredentials(options), args));
  }

  std::string Target() const { return absl::StrCat("127.0.0.1:", server_->server().port()); }

  static grpc::Status ClaimWith(v1::Dedup::Stub& stub, const std::string& key,
                                v1::ClaimResponse* response, grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return stub.Claim(context, ClaimOf(kNs, key, "worker-a"), response);
  }

  TestCerts certs_;
  std::unique_ptr<TestServer> server_;
  int connections_ = 0;
};

TEST_F(TlsTest, AClientWithACertificateOfTheCaIsServed) {
  grpc::ClientContext context;
  v1::ClaimResponse response;
  const grpc::Status status = ClaimWith(*StubWith("ca", "client"), "order-1", &response, &context);

  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  EXPECT_EQ(response.outcome(), v1::ClaimResponse::ACQUIRED);
}

TEST_F(TlsTest, ClientsWithoutACertificateOfTheCaAreRefused) {
  for (const char* client : {"", "stranger"}) {
    grpc::ClientContext context;
    v1::ClaimResponse response;
    const grpc::Status status = ClaimWith(*StubWith("ca", client), "order-1", &response, &context);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "client certificate '" << client << "': " << status.error_message();
  }
  grpc::ClientContext context;
  v1::ClaimResponse response;
  auto plaintext =
      v1::Dedup::NewStub(grpc::CreateChannel(Target(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(ClaimWith(*plaintext, "order-1", &response, &context).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, AnExpiredClientCertificateOfTheCaIsRefused) {
  certs_.AddClient("expired", "URI:spiffe://test/worker-a", /*days=*/-1);
  grpc::ClientContext context;
  v1::ClaimResponse response;
  const grpc::Status status = ClaimWith(*StubWith("ca", "expired"), "order-1", &response, &context);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  // The same identity with a valid certificate is served.
  grpc::ClientContext valid;
  EXPECT_TRUE(ClaimWith(*StubWith("ca", "client"), "order-1", &response, &valid).ok());
}

TEST_F(TlsTest, ARotatedServerCertificateIsUsedByNewConnectionsWithoutARestart) {
  auto before = StubWith("ca", "client");
  grpc::ClientContext first;
  v1::ClaimResponse response;
  ASSERT_TRUE(ClaimWith(*before, "order-1", &response, &first).ok());
  ASSERT_EQ(first.auth_context()->FindPropertyValues("x509_common_name").front(), "server");
  // A Stream open across the rotation, answering a batch on every round.
  grpc::ClientContext stream_context;
  stream_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = before->Stream(&stream_context);
  uint64_t streamed = 0;
  auto stream_one = [&](const std::string& key) {
    v1::BatchRequest batch;
    batch.set_batch_id(++streamed);
    *batch.add_operations() = Op(ClaimOf(kNs, key, "worker-s"));
    v1::BatchResponse answer;
    return stream->Write(batch) && stream->Read(&answer) && answer.batch_id() == streamed &&
           answer.results(0).claim().outcome() == v1::ClaimResponse::ACQUIRED;
  };
  ASSERT_TRUE(stream_one("streamed-0"));

  // Replaced the way a secret volume is: whole files renamed into place.
  std::filesystem::copy_file(certs_.Key("server-rotated"), certs_.Key("server") + ".new");
  std::filesystem::copy_file(certs_.Pem("server-rotated"), certs_.Pem("server") + ".new");
  std::filesystem::rename(certs_.Key("server") + ".new", certs_.Key("server"));
  std::filesystem::rename(certs_.Pem("server") + ".new", certs_.Pem("server"));

  std::string seen;
  for (int i = 0; i < 50 && seen != "server-rotated"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // Refreshes every 1s.
    grpc::ClientContext context;
    const grpc::Status status =
        ClaimWith(*StubWith("ca", "client"), absl::StrCat("order-", i + 2), &response, &context);
    ASSERT_TRUE(status.ok()) << "no call fails during rotation: " << status.error_message();
    ASSERT_TRUE(stream_one(absl::StrCat("streamed-", i + 1))) << "the Stream fails at round " << i;
    auto names = context.auth_context()->FindPropertyValues("x509_common_name");
    if (!names.empty()) seen = std::string(names.front().data(), names.front().size());
  }
  EXPECT_EQ(seen, "server-rotated");
  grpc::ClientContext again;
  EXPECT_TRUE(ClaimWith(*before, "order-last", &response, &again).ok())
      << "the connection made before the rotation keeps working";
  stream->WritesDone();
  const grpc::Status stream_status = stream->Finish();
  EXPECT_TRUE(stream_status.ok()) << stream_status.error_message();
  EXPECT_GT(streamed, 1u);
}

TEST(LogRateLimiterTest, OneLinePerIntervalPerSourceSayingHowManyWereHeldBack) {
  LogRateLimiter limiter(absl::Seconds(10));
  const absl::Time start = absl::FromUnixSeconds(1'700'000'000);
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Admit("a.cc:1", start, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_FALSE(limiter.Admit("a.cc:1", start + absl::Seconds(1), &suppressed));
  EXPECT_FALSE(limiter.Admit("a.cc:1", start + absl::Seconds(9), &suppressed));
  EXPECT_TRUE(limiter.Admit("b.cc:2", start + absl::Seconds(9), &suppressed)) << "its own budget";
  EXPECT_TRUE(limiter.Admit("a.cc:1", start + absl::Seconds(10), &suppressed));
  EXPECT_EQ(suppressed, 2u);
}

// A hostile client can fail handshakes on purpose: each is counted, and
// gRPC's line about it reaches the log (in dedupd's format) at most once
// per 10 s, so the log cannot be flooded.
TEST_F(TlsTest, FailedHandshakesAreCountedAndTheirLinesHeldBack) {
  std::ostringstream captured;
  const std::shared_ptr<spdlog::logger> saved = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)));
  const uint64_t before = FailedTlsHandshakes();
  constexpr int kAttempts = 100;
  for (int i = 0; i < kAttempts; ++i) {
    const int fd = ::dedup::test::ConnectLoopback(server_->server().port());
    ASSERT_GE(fd, 0);
    constexpr char kNotTls[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(write(fd, kNotTls, sizeof(kNotTls) - 1), static_cast<ssize_t>(sizeof(kNotTls) - 1));
    char buffer[256];
    while (read(fd, buffer, sizeof(buffer)) > 0) {
    }
    close(fd);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (FailedTlsHandshakes() - before < kAttempts &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  spdlog::set_default_logger(saved);
  const uint64_t failed = FailedTlsHandshakes() - before;
  const std::string log = captured.str();
  const size_t lines = std::count(log.begin(), log.end(), '\n');
  std::printf("[ measured ] %d bad handshakes: %llu counted, %zu log lines (%zu bytes)\n",
              kAttempts, static_cast<unsigned long long>(failed), lines, log.size());
  EXPECT_EQ(failed, static_cast<uint64_t>(kAttempts));
  EXPECT_LE(lines, 5u) << log;
  // The server still serves a client with a certificate.
  grpc::ClientContext context;
  v1::ClaimResponse response;
  EXPECT_TRUE(ClaimWith(*StubWith("ca", "client"), "after-flood", &response, &context).ok());
}

}  // namespace
}  // namespace dedup::server::test
