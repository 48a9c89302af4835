// Wall-clock steps through the server (design.md §5, "Clock"): the server's
// store reads an injected clock that is stepped +2 h, then back; duplicates
// are still intercepted and leases last their length in elapsed time.
// tests/storage/store_clock_test.cc runs the same under load, with the
// broken store that reads the raw wall clock.

#include "prometheus/metric_family.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "payments";
constexpr int64_t kMinuteMs = 60'000;
constexpr int64_t kHourMs = 60 * kMinuteMs;
constexpr int64_t kLeaseMs = 5 * kMinuteMs;
// Above the default retention floor (1 h), below the step.
constexpr int64_t kRetentionMs = 90 * kMinuteMs;
constexpr int64_t kStepMs = 2 * kHourMs;

class ClockStepTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(durability: "buffered" clock_step_tolerance: "1s" clock_step_confirmation: "10m")pb";
  }

  // dedup_clock_step_readings_total{direction}, after a fresh storage reading.
  double StepReadings(const std::string& direction) {
    server_->server().RefreshStorageStats();
    for (const prometheus::MetricFamily& family :
         server_->server().metrics()->registry()->Collect()) {
      if (family.name != "dedup_clock_step_readings_total") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        if (!metric.label.empty() && metric.label[0].value == direction) {
          return metric.counter.value;
        }
      }
    }
    ADD_FAILURE() << "no dedup_clock_step_readings_total{direction=\"" << direction << "\"}";
    return -1;
  }
};

TEST_F(ClockStepTest, StepsAreCountedInAMetricByDirection) {
  MustAcquire(kNs, "before", "worker-a");
  EXPECT_EQ(StepReadings("forward"), 0);
  EXPECT_EQ(StepReadings("backward"), 0);
  clock_.StepMs(kStepMs);
  MustAcquire(kNs, "ahead", "worker-a");
  EXPECT_GT(StepReadings("forward"), 0);
  EXPECT_EQ(StepReadings("backward"), 0);
  clock_.StepMs(-2 * kStepMs);
  MustAcquire(kNs, "behind", "worker-a");
  EXPECT_GT(StepReadings("backward"), 0);
}

TEST_F(ClockStepTest, StepForwardAndBackLetsNoDuplicateThroughAndKeepsLeasesToTheirLength) {
  const uint64_t paid = MustAcquire(kNs, "pay-1", "worker-a");
  v1::CompleteRequest complete = CompleteOf(kNs, "pay-1", paid, "receipt-1");
  complete.set_retention_ms(kRetentionMs);
  ASSERT_EQ(Complete(complete).outcome(), v1::CompleteResponse::OK);
  ASSERT_EQ(Claim(ClaimOf(kNs, "working", "worker-a", kLeaseMs)).outcome(),
            v1::ClaimResponse::ACQUIRED);

  // NTP steps the wall clock two hours ahead, past the retention and the
  // lease, and takes it back two minutes later.
  clock_.StepMs(kStepMs);
  EXPECT_EQ(Claim(ClaimOf(kNs, "pay-1", "worker-b")).outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(Claim(ClaimOf(kNs, "working", "worker-b")).outcome(), v1::ClaimResponse::IN_PROGRESS);
  ASSERT_EQ(Claim(ClaimOf(kNs, "during", "worker-a", kLeaseMs)).outcome(),
            v1::ClaimResponse::ACQUIRED);
  clock_.AdvanceMs(2 * kMinuteMs);
  clock_.StepMs(-kStepMs);
  EXPECT_EQ(Claim(ClaimOf(kNs, "pay-1", "worker-b")).outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(Claim(ClaimOf(kNs, "working", "worker-b")).outcome(), v1::ClaimResponse::IN_PROGRESS);

  // Five minutes (and the tolerance) after each claim, its lease has ended:
  // the step back did not stretch the one taken during the step.
  clock_.AdvanceMs(3 * kMinuteMs + 2'000);
  const v1::ClaimResponse taken = Claim(ClaimOf(kNs, "working", "worker-b"));
  EXPECT_EQ(taken.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_TRUE(taken.takeover());
  EXPECT_EQ(Claim(ClaimOf(kNs, "during", "worker-b")).outcome(), v1::ClaimResponse::ACQUIRED);
  // Within the retention in elapsed time: still a duplicate.
  EXPECT_EQ(Claim(ClaimOf(kNs, "pay-1", "worker-c")).outcome(), v1::ClaimResponse::COMPLETED);
}

}  // namespace
}  // namespace dedup::server::test
