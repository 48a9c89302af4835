#ifndef DEDUP_TESTS_SERVER_TEST_SERVER_H_
#define DEDUP_TESTS_SERVER_TEST_SERVER_H_

// Shared set-up of the server tests: a real DedupServer on 127.0.0.1 port 0
// over a fresh temp data directory, a stub connected to it, request builders
// and matchers for gRPC statuses.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/dedup_server.h"
#include "storage/clock.h"
#include "tests/common/temp_dir.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace dedup::server::test {

// Where the manual clock of every test starts (2023-11-14T22:13:20Z).
inline constexpr int64_t kStartMs = 1'700'000'000'000;

// The built-in namespace policy (design.md §4), for expectations.
inline constexpr int64_t kDefaultLeaseMs = 30'000;
inline constexpr int64_t kDefaultLeaseMaxMs = 10 * 60'000;
inline constexpr int64_t kDefaultRetentionMs = 24 * 3600'000LL;

using ::dedup::test::TempDir;

// A DedupServer with its own data directory, and a client connected to it.
class TestServer {
 public:
  // Starts a server configured by `config_text` (a dedup.v1.ServerConfig in
  // text format) with listen and data_dir filled in. `clock` must outlive
  // the server; null means the system clock. `env`, if not null, is the
  // RocksDB Env of its store (a FaultInjectionFileSystem's, to fail disks).
  static absl::StatusOr<std::unique_ptr<TestServer>> Start(
      const std::string& config_text, const storage::Clock* clock,
      std::shared_ptr<rocksdb::Env> env = nullptr);

  // Shuts the server down, then removes its data directory.
  ~TestServer();

  v1::Dedup::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  DedupServer& server() { return *server_; }

 private:
  TestServer() = default;

  TempDir dir_;  // Destroyed last: the server must be gone first.
  std::unique_ptr<DedupServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Dedup::Stub> stub_;
};

// Every call gets a deadline so that a hung server fails the test instead
// of hanging the suite.
std::unique_ptr<grpc::ClientContext> NewContext();

// Request builders. Unset optional fields stay unset (policy defaults).
v1::ClaimRequest ClaimOf(const std::string& ns, const std::string& key, const std::string& owner);
v1::ClaimRequest ClaimOf(const std::string& ns, const std::string& key, const std::string& owner,
                         uint64_t lease_ms);
v1::CompleteRequest CompleteOf(const std::string& ns, const std::string& key, uint64_t token,
                               const std::string& result);
v1::ReleaseRequest ReleaseOf(const std::string& ns, const std::string& key, uint64_t token);
v1::ExtendRequest ExtendOf(const std::string& ns, const std::string& key, uint64_t token);
v1::QueryRequest QueryOf(const std::string& ns, const std::string& key);
v1::ScanRequest ScanOf(const std::string& ns);

// Wraps single requests as Batch operations.
v1::Operation Op(const v1::ClaimRequest& request);
v1::Operation Op(const v1::CompleteRequest& request);
v1::Operation Op(const v1::ReleaseRequest& request);
v1::Operation Op(const v1::ExtendRequest& request);
v1::Operation Op(const v1::QueryRequest& request);

// The status of a call whose outcome is expected to be an error.
grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::ClaimRequest& request);
grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::CompleteRequest& request);
grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::ReleaseRequest& request);
grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::ExtendRequest& request);
grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::QueryRequest& request);
grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::BatchRequest& request);

// A Stream call a test holds open.
struct OpenStream {
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>> stream;
};
// Opens a Stream on `stub` with `open->context` and runs one Query of
// namespace `ns` through it, so that the server holds it: OK while the
// call stays open, else how it ended.
grpc::Status OpenWithQuery(v1::Dedup::Stub& stub, const std::string& ns, OpenStream* open);

// Reads a whole Scan; `status` receives how it ended.
std::vector<v1::Record> ScanAll(v1::Dedup::Stub& stub, const v1::ScanRequest& request,
                                grpc::Status* status);

// The keys of `records`, sorted.
std::vector<std::string> KeysOf(const std::vector<v1::Record>& records);

// A gRPC status with `code` whose message starts with `field` (the API
// promises that bad input is answered naming the field).
MATCHER_P2(IsErrorNaming, code, field,
           std::string("is a gRPC error with code ") + ::testing::PrintToString(code) +
               " naming \"" + field + "\"") {
  *result_listener << "code " << arg.error_code() << ", message \"" << arg.error_message() << "\"";
  return arg.error_code() == code && arg.error_message().rfind(field, 0) == 0;
}

// Shorthand for the commonest case: bad input naming the field.
inline auto IsInvalidArgumentNaming(const std::string& field) {
  return IsErrorNaming(grpc::StatusCode::INVALID_ARGUMENT, field);
}

MATCHER(IsOk, "is an OK gRPC status") {
  *result_listener << "code " << arg.error_code() << ", message \"" << arg.error_message() << "\"";
  return arg.ok();
}

// A server on a manual clock, started before each test and shut down after
// it. Calls that must succeed at the gRPC level fail the test otherwise and
// return an empty response.
class ServerTest : public ::testing::Test {
 protected:
  // The server's configuration; fixtures override it to declare namespaces.
  // listen and data_dir are always filled in by TestServer.
  virtual std::string Config() const { return R"pb(durability: "buffered")pb"; }

  void SetUp() override;
  void TearDown() override;

  v1::Dedup::Stub& stub() { return server_->stub(); }

  v1::ClaimResponse Claim(const v1::ClaimRequest& request);
  v1::CompleteResponse Complete(const v1::CompleteRequest& request);
  v1::ReleaseResponse Release(const v1::ReleaseRequest& request);
  v1::ExtendResponse Extend(const v1::ExtendRequest& request);
  v1::QueryResponse Query(const v1::QueryRequest& request);
  v1::BatchResponse Batch(const v1::BatchRequest& request);
  std::vector<v1::Record> Scan(const v1::ScanRequest& request);

  // Claims `key` in `ns` for `owner` and returns the token; fails the test
  // unless the claim is ACQUIRED.
  uint64_t MustAcquire(const std::string& ns, const std::string& key, const std::string& owner);

  storage::ManualClock clock_{kStartMs};
  std::unique_ptr<TestServer> server_;
};

}  // namespace dedup::server::test

#endif  // DEDUP_TESTS_SERVER_TEST_SERVER_H_
