#include "tests/server/test_server.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/server_settings.h"
#include "storage/testing/rocksdb_env.h"

namespace dedup::server::test {
namespace {

constexpr auto kCallDeadline = std::chrono::seconds(20);

template <typename Request, typename Response>
using UnaryMethod = grpc::Status (v1::Dedup::Stub::*)(grpc::ClientContext*, const Request&,
                                                      Response*);

// Makes a unary call that must succeed; a failed status fails the test and
// leaves `response` empty.
template <typename Request, typename Response>
Response MustCall(v1::Dedup::Stub& stub, UnaryMethod<Request, Response> method,
                  const Request& request) {
  Response response;
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  const grpc::Status status = (stub.*method)(context.get(), request, &response);
  if (!status.ok()) {
    ADD_FAILURE() << "call failed with code " << status.error_code() << ": "
                  << status.error_message() << "\nrequest: " << request.ShortDebugString();
    return Response();
  }
  return response;
}

template <typename Request, typename Response>
grpc::Status CallStatus(v1::Dedup::Stub& stub, UnaryMethod<Request, Response> method,
                        const Request& request) {
  Response response;
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  return (stub.*method)(context.get(), request, &response);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestServer>> TestServer::Start(const std::string& config_text,
                                                              const storage::Clock* clock,
                                                              std::shared_ptr<rocksdb::Env> env) {
  absl::StatusOr<v1::ServerConfig> config = ParseConfigText(config_text);
  if (!config.ok()) return config.status();
  std::unique_ptr<TestServer> test_server(new TestServer());
  config->set_listen("127.0.0.1:0");
  // Metrics stay off unless a test asks.
  if (config->metrics_listen().empty()) config->set_metrics_listen("off");
  config->set_data_dir(test_server->dir_.path() + "/data");
  absl::StatusOr<ServerSettings> settings = ResolveSettings(*config);
  if (!settings.ok()) return settings.status();
  if (env != nullptr) storage::SetRocksDbEnvForTesting(&settings->store, std::move(env));
  absl::StatusOr<std::unique_ptr<DedupServer>> server = DedupServer::Start(*settings, clock);
  if (!server.ok()) return server.status();
  test_server->server_ = std::move(*server);
  test_server->channel_ = grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", test_server->server_->port()), grpc::InsecureChannelCredentials());
  test_server->stub_ = v1::Dedup::NewStub(test_server->channel_);
  return test_server;
}

TestServer::~TestServer() {
  stub_.reset();
  channel_.reset();
  if (server_ != nullptr) server_->Shutdown(absl::Seconds(5));
  server_.reset();
}

std::unique_ptr<grpc::ClientContext> NewContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  return context;
}

v1::ClaimRequest ClaimOf(const std::string& ns, const std::string& key, const std::string& owner) {
  v1::ClaimRequest request;
  request.set_namespace_(ns);
  request.set_key(key);
  request.set_owner(owner);
  return request;
}

v1::ClaimRequest ClaimOf(const std::string& ns, const std::string& key, const std::string& owner,
                         uint64_t lease_ms) {
  v1::ClaimRequest request = ClaimOf(ns, key, owner);
  request.set_lease_ms(lease_ms);
  return request;
}

v1::CompleteRequest CompleteOf(const std::string& ns, const std::string& key, uint64_t token,
                               const std::string& result) {
  v1::CompleteRequest request;
  request.set_namespace_(ns);
  request.set_key(key);
  request.set_token(token);
  request.set_result(result);
  return request;
}

v1::ReleaseRequest ReleaseOf(const std::string& ns, const std::string& key, uint64_t token) {
  v1::ReleaseRequest request;
  request.set_namespace_(ns);
  request.set_key(key);
  request.set_token(token);
  return request;
}

v1::ExtendRequest ExtendOf(const std::string& ns, const std::string& key, uint64_t token) {
  v1::ExtendRequest request;
  request.set_namespace_(ns);
  request.set_key(key);
  request.set_token(token);
  return request;
}

v1::QueryRequest QueryOf(const std::string& ns, const std::string& key) {
  v1::QueryRequest request;
  request.set_namespace_(ns);
  request.set_key(key);
  return request;
}

v1::ScanRequest ScanOf(const std::string& ns) {
  v1::ScanRequest request;
  request.set_namespace_(ns);
  return request;
}

v1::Operation Op(const v1::ClaimRequest& request) {
  v1::Operation op;
  *op.mutable_claim() = request;
  return op;
}

v1::Operation Op(const v1::CompleteRequest& request) {
  v1::Operation op;
  *op.mutable_complete() = request;
  return op;
}

v1::Operation Op(const v1::ReleaseRequest& request) {
  v1::Operation op;
  *op.mutable_release() = request;
  return op;
}

v1::Operation Op(const v1::ExtendRequest& request) {
  v1::Operation op;
  *op.mutable_extend() = request;
  return op;
}

v1::Operation Op(const v1::QueryRequest& request) {
  v1::Operation op;
  *op.mutable_query() = request;
  return op;
}

grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::ClaimRequest& request) {
  return CallStatus(stub, &v1::Dedup::Stub::Claim, request);
}

grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::CompleteRequest& request) {
  return CallStatus(stub, &v1::Dedup::Stub::Complete, request);
}

grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::ReleaseRequest& request) {
  return CallStatus(stub, &v1::Dedup::Stub::Release, request);
}

grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::ExtendRequest& request) {
  return CallStatus(stub, &v1::Dedup::Stub::Extend, request);
}

grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::QueryRequest& request) {
  return CallStatus(stub, &v1::Dedup::Stub::Query, request);
}

grpc::Status OpenWithQuery(v1::Dedup::Stub& stub, const std::string& ns, OpenStream* open) {
  open->stream = stub.Stream(open->context.get());
  v1::BatchRequest batch;
  *batch.add_operations() = Op(QueryOf(ns, "k"));
  v1::BatchResponse response;
  if (open->stream->Write(batch) && open->stream->Read(&response)) return grpc::Status::OK;
  open->stream->WritesDone();
  return open->stream->Finish();
}

grpc::Status StatusOf(v1::Dedup::Stub& stub, const v1::BatchRequest& request) {
  return CallStatus(stub, &v1::Dedup::Stub::Batch, request);
}

std::vector<v1::Record> ScanAll(v1::Dedup::Stub& stub, const v1::ScanRequest& request,
                                grpc::Status* status) {
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  std::unique_ptr<grpc::ClientReader<v1::Record>> reader = stub.Scan(context.get(), request);
  std::vector<v1::Record> records;
  v1::Record record;
  while (reader->Read(&record)) records.push_back(record);
  *status = reader->Finish();
  return records;
}

std::vector<std::string> KeysOf(const std::vector<v1::Record>& records) {
  std::vector<std::string> keys;
  keys.reserve(records.size());
  for (const v1::Record& record : records) keys.push_back(record.key());
  std::sort(keys.begin(), keys.end());
  return keys;
}

void ServerTest::SetUp() {
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(Config(), &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
}

void ServerTest::TearDown() { server_.reset(); }

v1::ClaimResponse ServerTest::Claim(const v1::ClaimRequest& request) {
  return MustCall(stub(), &v1::Dedup::Stub::Claim, request);
}

v1::CompleteResponse ServerTest::Complete(const v1::CompleteRequest& request) {
  return MustCall(stub(), &v1::Dedup::Stub::Complete, request);
}

v1::ReleaseResponse ServerTest::Release(const v1::ReleaseRequest& request) {
  return MustCall(stub(), &v1::Dedup::Stub::Release, request);
}

v1::ExtendResponse ServerTest::Extend(const v1::ExtendRequest& request) {
  return MustCall(stub(), &v1::Dedup::Stub::Extend, request);
}

v1::QueryResponse ServerTest::Query(const v1::QueryRequest& request) {
  return MustCall(stub(), &v1::Dedup::Stub::Query, request);
}

v1::BatchResponse ServerTest::Batch(const v1::BatchRequest& request) {
  return MustCall(stub(), &v1::Dedup::Stub::Batch, request);
}

std::vector<v1::Record> ServerTest::Scan(const v1::ScanRequest& request) {
  grpc::Status status;
  std::vector<v1::Record> records = ScanAll(stub(), request, &status);
  EXPECT_THAT(status, IsOk()) << "scan " << request.ShortDebugString();
  return records;
}

uint64_t ServerTest::MustAcquire(const std::string& ns, const std::string& key,
                                 const std::string& owner) {
  const v1::ClaimResponse claim = Claim(ClaimOf(ns, key, owner));
  EXPECT_EQ(claim.outcome(), v1::ClaimResponse::ACQUIRED) << claim.ShortDebugString();
  return claim.token();
}

}  // namespace dedup::server::test
