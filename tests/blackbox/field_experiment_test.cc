// The field experiment of the client issue, end to end through the dedupd
// binary: a payment consumer fleet on an at-least-once broker, with and
// without the guard (client/examples/payment_pipeline.h).
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/examples/payment_pipeline.h"
#include "dedup/client/guard.h"
#include "gtest/gtest.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {

using ::dedup::test::TempDir;
namespace {

constexpr char kConfig[] = R"pb(
  namespaces {
    name: "payment-callback"
    policy { lease_default: "30s" max_attempts: 5 }
  }
)pb";

class FieldExperimentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_.Sub("dedupd.textproto"), kConfig);
    auto server = ServingDedupd::Start(dir_.path(), dir_.Sub("data"),
                                       {"--config=" + dir_.Sub("dedupd.textproto")});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client::ClientOptions options;
    options.endpoint = absl::StrCat("127.0.0.1:", server_->port());
    auto client = client::Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  examples::PipelineOptions Payments(const std::string& run_id) {
    examples::PipelineOptions options;
    options.payments = 2000;
    options.threads = 8;
    options.redeliver_every = 20;  // 100 copies arrive while the first is processed.
    options.charge_time = absl::Milliseconds(1);
    options.run_id = run_id;
    return options;
  }

  TempDir dir_;
  std::unique_ptr<ServingDedupd> server_;
  std::unique_ptr<client::Client> client_;
};

TEST_F(FieldExperimentTest, WithoutDedupEveryRedeliveryChargesAgain) {
  examples::PipelineOptions options = Payments("nodedup");
  options.use_guard = false;
  examples::PipelineReport report = examples::RunPaymentPipeline(nullptr, options);
  EXPECT_EQ(report.deliveries, 2100);
  EXPECT_EQ(report.charges, 2100);
  EXPECT_EQ(report.double_charged_keys, 100);
}

TEST_F(FieldExperimentTest, WithTheGuardEveryPaymentIsChargedExactlyOnceInEveryRun) {
  for (const char* run : {"guard-1", "guard-2", "guard-3"}) {
    SCOPED_TRACE(run);
    examples::PipelineReport report = examples::RunPaymentPipeline(client_.get(), Payments(run));
    EXPECT_EQ(report.charges, 2000);
    EXPECT_EQ(report.double_charged_keys, 0);
    EXPECT_EQ(report.executed, 2000);
    EXPECT_EQ(report.errors, 0);
    // Each of the 100 second copies was stopped: as a completed duplicate,
    // or first as in progress and then as a completed duplicate.
    EXPECT_EQ(report.duplicates, 100);
  }
}

TEST_F(FieldExperimentTest, ReleaseOnFailureLetsTheRedeliveryChargeSoNoPaymentIsLost) {
  examples::PipelineOptions options = Payments("flaky");
  options.fail_first_every = 50;  // 40 payments fail once and are redelivered once.
  examples::PipelineReport report = examples::RunPaymentPipeline(client_.get(), options);
  EXPECT_EQ(report.work_failures, 40);
  EXPECT_EQ(report.charges, 2000) << "without the release, the 40 redeliveries would find "
                                     "the key held and 1,960 payments would be charged";
  EXPECT_EQ(report.double_charged_keys, 0);
  EXPECT_EQ(report.errors, 0);
}

// A worker claims and dies. After its lease a redelivery runs once with a
// larger token, and the dead worker's late Complete is refused. Waits on
// the real lease (1 s) by polling, bounded.
TEST_F(FieldExperimentTest, DeadWorkersKeyIsRunOnceAfterItsLeaseAndItsLateCompleteIsStale) {
  v1::ClaimRequest claim;
  claim.set_namespace_("payment-callback");
  claim.set_key("pay-dead-worker");
  claim.set_owner("worker-that-dies");
  claim.set_lease_ms(1000);
  auto dead = client_->Claim(claim);
  ASSERT_TRUE(dead.ok()) << dead.status();
  ASSERT_EQ(dead->outcome(), v1::ClaimResponse::ACQUIRED);

  client::Guard guard(client_.get(), {"payment-callback", "worker-alive"});
  int runs = 0;
  uint64_t token = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  for (;;) {
    auto result = guard.Run("pay-dead-worker",
                            [&](const client::GuardContext& ctx) -> absl::StatusOr<std::string> {
                              ++runs;
                              token = ctx.token;
                              return std::string("charged");
                            });
    ASSERT_TRUE(result.ok()) << result.status();
    if (result->outcome == client::GuardOutcome::kExecuted) break;
    ASSERT_EQ(result->outcome, client::GuardOutcome::kInProgress);
    ASSERT_LT(absl::Now(), give_up) << "the dead worker's lease never expired";
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(runs, 1);
  EXPECT_GT(token, dead->token());

  v1::CompleteRequest late;
  late.set_namespace_("payment-callback");
  late.set_key("pay-dead-worker");
  late.set_token(dead->token());
  late.set_result("charged by the dead worker");
  auto completed = client_->Complete(late);
  ASSERT_TRUE(completed.ok()) << completed.status();
  EXPECT_EQ(completed->outcome(), v1::CompleteResponse::STALE_TOKEN);
}

}  // namespace
}  // namespace dedup::blackbox
