// What operators see: /metrics scraped over HTTP after scripted workloads
// asserts exact counter deltas, and health (gRPC, /healthz, /readyz)
// flips when storage fails under the server.
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/server_settings.h"
#include "storage/testing/rocksdb_env.h"
#include "tests/common/fault_injection_file_system.h"
#include "tests/common/http_scrape.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using ::dedup::test::HttpGet;
using ::dedup::test::HttpReply;
using ::dedup::test::ParseMetrics;

constexpr char kConfig[] = R"pb(
  durability: "buffered"
  max_namespace_labels: 2
  namespaces {
    name: "coupons"
    policy { retention_floor: "1s" lease_default: "10s" }
  }
)pb";

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(nullptr); }

  void Start(std::shared_ptr<rocksdb::Env> env) {
    auto config = ParseConfigText(kConfig);
    ASSERT_TRUE(config.ok()) << config.status();
    config->set_listen("127.0.0.1:0");
    config->set_metrics_listen("127.0.0.1:0");
    config->set_data_dir(dir_.path() + "/data");
    auto settings = ResolveSettings(*config);
    ASSERT_TRUE(settings.ok()) << settings.status();
    if (env != nullptr) storage::SetRocksDbEnvForTesting(&settings->store, std::move(env));
    auto server = DedupServer::Start(*settings, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Dedup::NewStub(channel_);
  }

  void TearDown() override {
    stub_.reset();
    channel_.reset();
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(5));
  }

  std::map<std::string, double> Scrape() {
    server_->RefreshStorageStats();
    HttpReply reply = HttpGet(server_->http_port(), "/metrics");
    EXPECT_EQ(reply.code, 200);
    return ParseMetrics(reply.body);
  }

  v1::ClaimResponse Claim(const std::string& ns, const std::string& key, const std::string& owner) {
    v1::ClaimResponse response;
    auto context = NewContext();
    EXPECT_TRUE(stub_->Claim(context.get(), ClaimOf(ns, key, owner), &response).ok());
    return response;
  }

  v1::CompleteResponse Complete(const std::string& ns, const std::string& key, uint64_t token,
                                std::optional<uint64_t> retention_ms = std::nullopt) {
    v1::CompleteRequest request = CompleteOf(ns, key, token, "done");
    if (retention_ms) request.set_retention_ms(*retention_ms);
    v1::CompleteResponse response;
    auto context = NewContext();
    EXPECT_TRUE(stub_->Complete(context.get(), request, &response).ok());
    return response;
  }

  std::string HealthOfDedup() {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service("dedup.v1.Dedup");
    grpc::health::v1::HealthCheckResponse response;
    auto context = NewContext();
    grpc::Status status = health->Check(context.get(), request, &response);
    if (!status.ok()) return absl::StrCat("error ", status.error_code());
    return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  }

  TempDir dir_;
  storage::ManualClock clock_{kStartMs};
  std::unique_ptr<DedupServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Dedup::Stub> stub_;
};

TEST_F(MetricsTest, HundredClaimsWithThirtyCompletedAndTenInProgressDuplicates) {
  std::map<std::string, uint64_t> tokens;
  for (int i = 0; i < 60; ++i) {
    tokens[absl::StrCat("k", i)] = Claim("coupons", absl::StrCat("k", i), "worker-a").token();
  }
  for (int i = 0; i < 50; ++i)
    Complete("coupons", absl::StrCat("k", i), tokens[absl::StrCat("k", i)]);
  for (int i = 0; i < 30; ++i) Claim("coupons", absl::StrCat("k", i), "worker-b");   // Completed.
  for (int i = 50; i < 60; ++i) Claim("coupons", absl::StrCat("k", i), "worker-b");  // In progress.

  auto m = Scrape();
  EXPECT_EQ(m[R"(dedup_claims_total{namespace="coupons",outcome="acquired"})"], 60);
  EXPECT_EQ(m[R"(dedup_claims_total{namespace="coupons",outcome="completed"})"], 30);
  EXPECT_EQ(m[R"(dedup_claims_total{namespace="coupons",outcome="in_progress"})"], 10);
  EXPECT_EQ(m[R"(dedup_duplicates_intercepted_total{kind="completed",namespace="coupons"})"], 30);
  EXPECT_EQ(m[R"(dedup_duplicates_intercepted_total{kind="in_progress",namespace="coupons"})"], 10);
  EXPECT_EQ(m[R"(dedup_completes_total{namespace="coupons",outcome="ok"})"], 50);
  EXPECT_EQ(m[R"(dedup_requests_total{code="OK",method="Claim"})"], 100);
  EXPECT_EQ(m[R"(dedup_requests_total{code="OK",method="Complete"})"], 50);
  EXPECT_EQ(m[R"(dedup_request_duration_seconds_count{method="Claim",namespace="coupons"})"], 100);
  EXPECT_EQ(m["dedup_requests_in_flight"], 0);
  EXPECT_EQ(m[R"(dedup_records{state="completed"})"], 50);
  EXPECT_EQ(m[R"(dedup_records{state="in_progress"})"], 10);
  EXPECT_GT(m["dedup_storage_bytes"], 0);
  EXPECT_EQ(m[R"(dedup_build_info{version="0.1.0"})"], 1);
}

TEST_F(MetricsTest, TakeoversStaleTokensMismatchesAndBadInputAreCounted) {
  const uint64_t old_token = Claim("coupons", "k", "worker-a").token();
  clock_.AdvanceMs(10'001);  // Past the namespace's 10 s lease.
  EXPECT_TRUE(Claim("coupons", "k", "worker-b").takeover());
  EXPECT_EQ(Complete("coupons", "k", old_token).outcome(), v1::CompleteResponse::STALE_TOKEN);
  v1::ClaimRequest fingerprinted = ClaimOf("coupons", "fp", "worker-a");
  fingerprinted.set_fingerprint("sha-1");
  v1::ClaimResponse ignored;
  auto c1 = NewContext();
  ASSERT_TRUE(stub_->Claim(c1.get(), fingerprinted, &ignored).ok());
  fingerprinted.set_fingerprint("sha-2");
  auto c2 = NewContext();
  ASSERT_TRUE(stub_->Claim(c2.get(), fingerprinted, &ignored).ok());
  EXPECT_EQ(ignored.outcome(), v1::ClaimResponse::MISMATCH);
  auto c3 = NewContext();
  EXPECT_FALSE(stub_->Claim(c3.get(), ClaimOf("coupons", "", "worker-a"), &ignored).ok());

  auto m = Scrape();
  EXPECT_EQ(m[R"(dedup_lease_takeovers_total{namespace="coupons"})"], 1);
  EXPECT_EQ(m[R"(dedup_stale_tokens_total{namespace="coupons"})"], 1);
  EXPECT_EQ(m[R"(dedup_completes_total{namespace="coupons",outcome="stale_token"})"], 1);
  EXPECT_EQ(m[R"(dedup_fingerprint_mismatches_total{namespace="coupons"})"], 1);
  EXPECT_EQ(m[R"(dedup_claims_total{namespace="coupons",outcome="mismatch"})"], 1);
  EXPECT_EQ(m[R"(dedup_requests_total{code="INVALID_ARGUMENT",method="Claim"})"], 1);
}

TEST_F(MetricsTest, NamespacesBeyondTheLabelLimitAreCountedAsOther) {
  for (const char* ns : {"first", "second", "third", "fourth"}) Claim(ns, "k", "worker-a");
  Claim("coupons", "k", "worker-a");  // Declared: always its own label.
  auto m = Scrape();
  EXPECT_EQ(m[R"(dedup_claims_total{namespace="first",outcome="acquired"})"], 1);
  EXPECT_EQ(m[R"(dedup_claims_total{namespace="second",outcome="acquired"})"], 1);
  EXPECT_EQ(m.count(R"(dedup_claims_total{namespace="third",outcome="acquired"})"), 0u);
  EXPECT_EQ(m[R"(dedup_claims_total{namespace="other",outcome="acquired"})"], 2);
  EXPECT_EQ(m[R"(dedup_claims_total{namespace="coupons",outcome="acquired"})"], 1);
}

TEST_F(MetricsTest, RecordsDroppedByTtlCompactionAreCounted) {
  for (int i = 0; i < 3; ++i) {
    const std::string key = absl::StrCat("short-", i);
    Complete("coupons", key, Claim("coupons", key, "worker-a").token(), 1000);
  }
  Complete("coupons", "long", Claim("coupons", "long", "worker-a").token());
  clock_.AdvanceMs(1001);
  ASSERT_TRUE(server_->store()->CompactAll().ok());
  auto m = Scrape();
  EXPECT_EQ(m[R"(dedup_compaction_dropped_records_total{reason="completed_retention"})"], 3);
  EXPECT_EQ(m[R"(dedup_records{state="completed"})"], 1);
}

TEST_F(MetricsTest, LatencyIsLabelledByNamespaceWithinTheLabelLimit) {
  Claim("coupons", "k", "worker-a");
  Claim("first", "k", "worker-a");
  v1::BatchRequest mixed;
  *mixed.add_operations()->mutable_claim() = ClaimOf("coupons", "b1", "worker-a");
  *mixed.add_operations()->mutable_claim() = ClaimOf("first", "b2", "worker-a");
  v1::BatchRequest single;
  *single.add_operations()->mutable_claim() = ClaimOf("coupons", "b3", "worker-a");
  for (const v1::BatchRequest* request : {&mixed, &single}) {
    v1::BatchResponse response;
    auto context = NewContext();
    ASSERT_TRUE(stub_->Batch(context.get(), *request, &response).ok());
  }
  v1::ClaimResponse refused;
  auto context = NewContext();
  EXPECT_EQ(stub_->Claim(context.get(), ClaimOf("junk-ns", "", "worker-a"), &refused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  auto m = Scrape();
  EXPECT_EQ(m[R"(dedup_request_duration_seconds_count{method="Claim",namespace="coupons"})"], 1);
  EXPECT_EQ(m[R"(dedup_request_duration_seconds_count{method="Claim",namespace="first"})"], 1);
  EXPECT_EQ(m[R"(dedup_request_duration_seconds_count{method="Claim",namespace="other"})"], 1);
  EXPECT_EQ(m.count(R"(dedup_request_duration_seconds_count{method="Claim",namespace="junk-ns"})"),
            0u);
  EXPECT_EQ(m[R"(dedup_request_duration_seconds_count{method="Batch",namespace="mixed"})"], 1);
  EXPECT_EQ(m[R"(dedup_request_duration_seconds_count{method="Batch",namespace="coupons"})"], 1);
  // The top buckets cover a long Scan.
  EXPECT_EQ(
      m.count(R"(dedup_request_duration_seconds_bucket{method="Scan",namespace="other",le="60"})"),
      1u);
}

TEST_F(MetricsTest, ProcessReadinessAndVolumeMetricsAreExported) {
  auto m = Scrape();
  EXPECT_GT(m["process_cpu_seconds_total"], 0);
  EXPECT_GT(m["process_resident_memory_bytes"], 1 << 20);
  EXPECT_GE(m["process_virtual_memory_bytes"], m["process_resident_memory_bytes"]);
  EXPECT_GT(m["process_open_fds"], 3);
  EXPECT_GE(m["process_max_fds"], m["process_open_fds"]);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_GT(m["process_start_time_seconds"], now - 24 * 3600);
  EXPECT_LE(m["process_start_time_seconds"], now + 1);
  EXPECT_EQ(m["dedup_ready"], 1);
  EXPECT_GT(m["dedup_storage_volume_total_bytes"], 0);
  EXPECT_GT(m["dedup_storage_volume_free_bytes"], 0);
  EXPECT_LE(m["dedup_storage_volume_free_bytes"], m["dedup_storage_volume_total_bytes"]);
  EXPECT_EQ(m.count("dedup_storage_write_stall_seconds_total"), 1u);
}

TEST_F(MetricsTest, ProbesAnswerOkWhileServing) {
  EXPECT_EQ(HttpGet(server_->http_port(), "/healthz").code, 200);
  EXPECT_EQ(HttpGet(server_->http_port(), "/readyz").code, 200);
  EXPECT_EQ(HttpGet(server_->http_port(), "/nothing-here").code, 404);
  EXPECT_EQ(HealthOfDedup(), "SERVING");
}

TEST_F(MetricsTest, StorageFailureTurnsHealthNotServingAndProbesUnavailable) {
  server_->Shutdown(absl::Seconds(1));
  stub_.reset();
  channel_.reset();
  auto [fs, env] = dedup::test::FaultInjectionFileSystem::Make();
  Start(env);
  Claim("coupons", "before", "worker-a");
  fs->FailWrites();

  v1::ClaimResponse response;
  auto context = NewContext();
  grpc::Status status =
      stub_->Claim(context.get(), ClaimOf("coupons", "after", "worker-a"), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();

  auto m = Scrape();  // Also runs the storage monitor now.
  EXPECT_EQ(m["dedup_storage_background_error"], 1);
  EXPECT_EQ(m["dedup_ready"], 0);
  EXPECT_EQ(m[R"(dedup_requests_total{code="UNAVAILABLE",method="Claim"})"], 1);
  EXPECT_EQ(HealthOfDedup(), "NOT_SERVING");
  EXPECT_EQ(HttpGet(server_->http_port(), "/healthz").code, 503);
  EXPECT_EQ(HttpGet(server_->http_port(), "/readyz").code, 503);
}

TEST_F(MetricsTest, FullDiskRefusesWritesKeepsReadsAndServesAgainWhenSpaceReturns) {
  server_->Shutdown(absl::Seconds(1));
  stub_.reset();
  channel_.reset();
  auto [fs, env] = dedup::test::FaultInjectionFileSystem::Make();
  Start(env);
  const uint64_t token = Claim("coupons", "before", "worker-a").token();
  Complete("coupons", "before", token);

  fs->SetSpaceLeft(0);
  v1::ClaimResponse refused;
  auto c1 = NewContext();
  grpc::Status status = stub_->Claim(c1.get(), ClaimOf("coupons", "during", "worker-a"), &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  v1::QueryResponse query;
  auto c2 = NewContext();
  ASSERT_TRUE(stub_->Query(c2.get(), QueryOf("coupons", "before"), &query).ok());
  EXPECT_EQ(query.record().state(), v1::STATE_COMPLETED);
  auto m = Scrape();  // The monitor sees the full disk and cannot resume yet.
  EXPECT_EQ(m["dedup_storage_background_error"], 1);
  EXPECT_EQ(m["dedup_ready"], 0);
  EXPECT_EQ(HttpGet(server_->http_port(), "/readyz").code, 503);
  EXPECT_EQ(HttpGet(server_->http_port(), "/healthz").code, 200);  // No restart loop.
  EXPECT_EQ(HealthOfDedup(), "NOT_SERVING");

  fs->SetSpaceLeft(dedup::test::FaultInjectionFileSystem::kUnlimited);
  m = Scrape();  // The monitor resumes the store.
  EXPECT_EQ(m["dedup_storage_background_error"], 0);
  EXPECT_EQ(m["dedup_ready"], 1);
  EXPECT_EQ(HttpGet(server_->http_port(), "/readyz").code, 200);
  EXPECT_EQ(HttpGet(server_->http_port(), "/healthz").code, 200);
  EXPECT_EQ(HealthOfDedup(), "SERVING");
  EXPECT_EQ(Claim("coupons", "during", "worker-a").outcome(), v1::ClaimResponse::ACQUIRED);
  auto c3 = NewContext();
  ASSERT_TRUE(stub_->Query(c3.get(), QueryOf("coupons", "before"), &query).ok());
  EXPECT_EQ(query.record().state(), v1::STATE_COMPLETED);
  EXPECT_EQ(query.record().token(), token);
}

TEST_F(MetricsTest, CorruptBlockAnswersDataLossForItsKeyAndIsCounted) {
  server_->Shutdown(absl::Seconds(1));
  stub_.reset();
  channel_.reset();
  auto [fs, env] = dedup::test::FaultInjectionFileSystem::Make();
  Start(env);
  const uint64_t token = Claim("coupons", "damaged", "worker-a").token();
  // Completed, so that Query shows the token (a live claim's is hidden).
  ASSERT_EQ(Complete("coupons", "damaged", token).outcome(), v1::CompleteResponse::OK);
  ASSERT_TRUE(server_->store()->Flush().ok());
  server_->Shutdown(absl::Seconds(1));
  stub_.reset();
  channel_.reset();
  Start(env);  // Nothing cached: the next read goes to the file.

  fs->CorruptNextRead(".sst");
  v1::QueryResponse query;
  auto c1 = NewContext();
  grpc::Status status = stub_->Query(c1.get(), QueryOf("coupons", "damaged"), &query);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS) << status.error_message();
  auto c2 = NewContext();
  ASSERT_TRUE(stub_->Query(c2.get(), QueryOf("coupons", "damaged"), &query).ok());
  EXPECT_EQ(query.record().state(), v1::STATE_COMPLETED);
  EXPECT_EQ(query.record().token(), token);  // Only that one read was damaged.
  auto m = Scrape();
  EXPECT_EQ(m["dedup_storage_corrupt_records_total"], 1);
  EXPECT_EQ(m[R"(dedup_requests_total{code="DATA_LOSS",method="Query"})"], 1);
  EXPECT_EQ(HttpGet(server_->http_port(), "/healthz").code, 200);
}

}  // namespace
}  // namespace dedup::server::test
