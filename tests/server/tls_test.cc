// Transport security (design.md §10): mutual TLS with certificates made by
// openssl at test time. A client with a certificate of the configured CA
// is served; one without a certificate, with one of another CA, or in
// plaintext is refused; a rotated server certificate is picked up without
// a restart.

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/auth_context.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "secure";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs a shell command; fails the test on a non-zero exit.
void RunShell(const std::string& command) {
  const int code = std::system((command + " >/dev/null 2>&1").c_str());
  ASSERT_EQ(code, 0) << command;
}

// A CA (NAME.pem, NAME.key) in `dir`.
void MakeCa(const std::string& dir, const std::string& name) {
  RunShell(absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes",
                        " -days 2 -subj /CN=", name, " -keyout ", dir, "/", name, ".key -out ", dir,
                        "/", name, ".pem"));
}

// A certificate NAME.pem with key NAME.key signed by CA `ca`, for CN `name`
// with subjectAltName `san`.
void MakeCert(const std::string& dir, const std::string& ca, const std::string& name,
              const std::string& san) {
  const std::string base = absl::StrCat(dir, "/", name);
  RunShell(absl::StrCat(
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=", name,
      " -keyout ", base, ".key -out ", base, ".csr"));
  std::ofstream(base + ".ext") << "subjectAltName=" << san << "\n";
  RunShell(absl::StrCat("openssl x509 -req -in ", base, ".csr -CA ", dir, "/", ca, ".pem -CAkey ",
                        dir, "/", ca, ".key -CAcreateserial -days 2 -extfile ", base, ".ext -out ",
                        base, ".pem"));
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = certs_.path();
    MakeCa(dir_, "ca");
    MakeCa(dir_, "other-ca");
    MakeCert(dir_, "ca", "server", "IP:127.0.0.1,DNS:localhost");
    MakeCert(dir_, "ca", "server-rotated", "IP:127.0.0.1,DNS:localhost");
    MakeCert(dir_, "ca", "client", "URI:spiffe://test/worker-a");
    MakeCert(dir_, "other-ca", "stranger", "URI:spiffe://test/stranger");
    const std::string config =
        absl::StrCat("durability: 'buffered' tls { cert: '", dir_, "/server.pem' key: '", dir_,
                     "/server.key' ca: '", dir_, "/ca.pem' refresh_interval: '1s' }");
    absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(config, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // A stub over TLS trusting `ca`, presenting `client` (empty: none), on a
  // connection of its own.
  std::unique_ptr<v1::Dedup::Stub> StubWith(const std::string& ca, const std::string& client) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ReadFile(absl::StrCat(dir_, "/", ca, ".pem"));
    if (!client.empty()) {
      options.pem_private_key = ReadFile(absl::StrCat(dir_, "/", client, ".key"));
      options.pem_cert_chain = ReadFile(absl::StrCat(dir_, "/", client, ".pem"));
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

  TempDir certs_;
  std::string dir_;
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

TEST_F(TlsTest, ARotatedServerCertificateIsUsedByNewConnectionsWithoutARestart) {
  auto before = StubWith("ca", "client");
  grpc::ClientContext first;
  v1::ClaimResponse response;
  ASSERT_TRUE(ClaimWith(*before, "order-1", &response, &first).ok());
  ASSERT_EQ(first.auth_context()->FindPropertyValues("x509_common_name").front(), "server");

  RunShell(absl::StrCat("cp ", dir_, "/server-rotated.key ", dir_, "/server.key.new && cp ", dir_,
                        "/server-rotated.pem ", dir_, "/server.pem.new && mv ", dir_,
                        "/server.key.new ", dir_, "/server.key && mv ", dir_, "/server.pem.new ",
                        dir_, "/server.pem"));

  std::string seen;
  for (int i = 0; i < 50 && seen != "server-rotated"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // Refreshes every 1s.
    grpc::ClientContext context;
    const grpc::Status status =
        ClaimWith(*StubWith("ca", "client"), absl::StrCat("order-", i + 2), &response, &context);
    ASSERT_TRUE(status.ok()) << "no call fails during rotation: " << status.error_message();
    auto names = context.auth_context()->FindPropertyValues("x509_common_name");
    if (!names.empty()) seen = std::string(names.front().data(), names.front().size());
  }
  EXPECT_EQ(seen, "server-rotated");
  grpc::ClientContext again;
  EXPECT_TRUE(ClaimWith(*before, "order-last", &response, &again).ok())
      << "the connection made before the rotation keeps working";
}

}  // namespace
}  // namespace dedup::server::test
