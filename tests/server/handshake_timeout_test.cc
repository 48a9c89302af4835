// Handshake timeout (design.md §10): a client that opens a TCP connection
// to the gRPC port and then sends nothing, or only the start of a TLS
// ClientHello or of the HTTP/2 preface, is disconnected once
// limits.handshake_timeout has passed, instead of holding a descriptor and
// a connection slot for gRPC's default of two minutes. Clients that
// complete their handshake are served, and stay connected while idle.

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/common/http_scrape.h"
#include "tests/server/test_certs.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using ::dedup::test::ClosedByPeerWithin;
using ::dedup::test::ConnectLoopback;

// The timeout the servers below are configured with, and the bound within
// which a silent connection must be closed: generous, so that a loaded
// machine does not fail the test, yet far below gRPC's default of 120 s.
constexpr char kTimeout[] = "500ms";
constexpr std::chrono::seconds kClosedWithin(5);

// Writes `bytes` to `fd` whole.
bool Send(int fd, const std::string& bytes) {
  return write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
}

class HandshakeTimeoutTest : public ServerTest {
 protected:
  std::string Config() const override {
    return absl::StrCat("durability: 'buffered' limits { handshake_timeout: '", kTimeout, "' }");
  }
};

TEST_F(HandshakeTimeoutTest, ASilentConnectionIsClosed) {
  const int fd = ConnectLoopback(server_->server().port());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(ClosedByPeerWithin(fd, kClosedWithin))
      << "a connection that sends nothing is still open after " << kClosedWithin.count() << " s";
  close(fd);
}

TEST_F(HandshakeTimeoutTest, AConnectionSendingPartOfThePrefaceIsClosed) {
  const int fd = ConnectLoopback(server_->server().port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(Send(fd, "PRI * HTTP/2.0\r\n"));  // Of "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".
  EXPECT_TRUE(ClosedByPeerWithin(fd, kClosedWithin));
  close(fd);
}

TEST_F(HandshakeTimeoutTest, AClientIsServedAndStaysConnectedWhileIdle) {
  MustAcquire("orders", "key-1", "worker-a");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(server_->channel()->GetState(false), GRPC_CHANNEL_READY)
      << "the timeout applies to the handshake only, not to idle connections";
  MustAcquire("orders", "key-2", "worker-a");
}

class TlsHandshakeTimeoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string config = absl::StrCat("durability: 'buffered' limits { handshake_timeout: '",
                                            kTimeout, "' } ", certs_.ServerTlsConfig());
    absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(config, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  TestCerts certs_;
  std::unique_ptr<TestServer> server_;
};

TEST_F(TlsHandshakeTimeoutTest, AConnectionSendingPartOfAClientHelloIsClosed) {
  const int fd = ConnectLoopback(server_->server().port());
  ASSERT_GE(fd, 0);
  // A handshake record announcing 512 bytes, and the first 4 of them: the
  // type (ClientHello) and length of a handshake message.
  ASSERT_TRUE(Send(fd, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc", 9)));
  EXPECT_TRUE(ClosedByPeerWithin(fd, kClosedWithin));
  close(fd);
}

TEST_F(TlsHandshakeTimeoutTest, AClientWithACertificateIsServed) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadFile(certs_.Pem("ca"));
  options.pem_private_key = ReadFile(certs_.Key("client"));
  options.pem_cert_chain = ReadFile(certs_.Pem("client"));
  auto stub = v1::Dedup::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->server().port()), grpc::SslCredentials(options)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ClaimResponse response;
  EXPECT_THAT(stub->Claim(&context, ClaimOf("orders", "key-1", "worker-a"), &response), IsOk());
  EXPECT_EQ(response.outcome(), v1::ClaimResponse::ACQUIRED);
}

}  // namespace
}  // namespace dedup::server::test
