// A rate per identity (limits.max_operations_per_second_per_identity,
// design.md §10): a tenant ahead of its rate waits for its time, one booked
// too far ahead is refused, and other tenants are neither held nor charged.
// The checks of time are lower bounds: a slow machine makes calls take
// longer, never shorter, so none of them can fail for being slow.
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "prometheus/metric_family.h"
#include "server/tenant_quota.h"
#include "server/worker_pool.h"
#include "tests/server/tenant_server.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TenantQuota PacedAt(uint32_t operations_per_second) {
  return TenantQuota({/*max_open_streams=*/1, /*max_queued_tasks=*/8, operations_per_second});
}

// At 1,000 operations a second, tasks of 10 take 10 ms each: the first
// 100 ms of them start at once, each later one 10 ms after the one before,
// and one that would wait more than kMaxRateWait is refused uncharged.
TEST(TenantQuotaTest, APacedTenantStartsAtItsRateAfterABurstAndIsRefusedFarAhead) {
  TenantQuota quota = PacedAt(1000);
  const Clock::time_point t0(std::chrono::hours(1));
  static_assert(TenantQuota::kRateBurst == milliseconds(100));
  static_assert(TenantQuota::kMaxRateWait == milliseconds(500));
  for (int n = 0; n <= 60; ++n) {
    const std::optional<Clock::time_point> start = quota.Pace("a", 10, t0);
    ASSERT_TRUE(start.has_value()) << "task " << n;
    EXPECT_EQ(*start, std::max(t0, t0 + milliseconds(10 * n) - milliseconds(100))) << "task " << n;
  }
  // The 62nd would start 510 ms from now.
  EXPECT_EQ(quota.Pace("a", 10, t0), std::nullopt);
  // Nothing was charged for it: 20 ms later it waits 490 ms.
  EXPECT_EQ(quota.Pace("a", 10, t0 + milliseconds(20)), t0 + milliseconds(510));
  // Another tenant, and callers without an identity, are not held by it.
  EXPECT_EQ(quota.Pace("b", 10, t0), t0);
  EXPECT_EQ(quota.Pace("", 1'000'000, t0), t0);
  EXPECT_EQ(quota.Pace("", 1'000'000, t0), t0);
}

// A pause earns a burst again, but no more than one.
TEST(TenantQuotaTest, APauseEarnsOneBurstAndNoMore) {
  TenantQuota quota = PacedAt(1000);
  const Clock::time_point t0(std::chrono::hours(1));
  ASSERT_EQ(quota.Pace("a", 500, t0), t0);
  // Paid until t0 + 500 ms; ten seconds later, 100 ms of operations start
  // at once and the next waits.
  const Clock::time_point later = t0 + std::chrono::seconds(10);
  EXPECT_EQ(quota.Pace("a", 100, later), later);
  EXPECT_EQ(quota.Pace("a", 10, later), later);
  EXPECT_EQ(quota.Pace("a", 10, later), later + milliseconds(10));
}

TEST(TenantQuotaTest, WithoutARateNothingIsPaced) {
  TenantQuota quota = PacedAt(0);
  const Clock::time_point t0(std::chrono::hours(1));
  for (int n = 0; n < 100; ++n) EXPECT_EQ(quota.Pace("a", 1000, t0), t0);
}

// The tasks of SubmitAt wait for their time, the earliest first whatever
// the order they came in, and count against the bound while they wait.
TEST(WorkerPoolTest, DelayedTasksRunAtTheirTimeAndCountAgainstTheBound) {
  WorkerPool pool(/*threads=*/1, /*max_queued=*/3, "test-worker");
  const Clock::time_point submitted = Clock::now();
  absl::Mutex mu;
  std::vector<std::pair<int, Clock::time_point>> ran;
  const auto record = [&](int which) {
    return [&, which] {
      absl::MutexLock lock(&mu);
      ran.emplace_back(which, Clock::now());
    };
  };
  ASSERT_EQ(pool.SubmitAt(record(1), WorkerPool::Lane::kNormal, submitted + milliseconds(400)),
            WorkerPool::Admission::kQueued);
  ASSERT_EQ(pool.SubmitAt(record(2), WorkerPool::Lane::kNormal, submitted + milliseconds(200)),
            WorkerPool::Admission::kQueued);
  ASSERT_EQ(pool.SubmitAt(record(3), WorkerPool::Lane::kNormal, submitted - milliseconds(1)),
            WorkerPool::Admission::kQueued);
  // The one due ran; two wait, and with one more the bound is reached.
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](std::vector<std::pair<int, Clock::time_point>>* r) { return !r->empty(); }, &ran));
  }
  EXPECT_EQ(pool.SubmitAt(record(4), WorkerPool::Lane::kYielding, submitted + milliseconds(100)),
            WorkerPool::Admission::kQueued);
  EXPECT_EQ(pool.Submit(record(5)), WorkerPool::Admission::kFull);
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](std::vector<std::pair<int, Clock::time_point>>* r) { return r->size() == 4; }, &ran));
    std::vector<int> order;
    for (const auto& [which, at] : ran) order.push_back(which);
    EXPECT_EQ(order, (std::vector<int>{3, 4, 2, 1}));
    for (const auto& [which, at] : ran) {
      const milliseconds due(which == 1 ? 400 : which == 2 ? 200 : which == 4 ? 100 : 0);
      EXPECT_GE(at - submitted, due) << "task " << which;
    }
  }
}

TEST(WorkerPoolTest, ShutdownRunsDelayedTasksAtOnce) {
  WorkerPool pool(/*threads=*/1, /*max_queued=*/4, "test-worker", /*yielding_threads=*/1);
  std::atomic<int> ran{0};
  const Clock::time_point in_an_hour = Clock::now() + std::chrono::hours(1);
  ASSERT_EQ(pool.SubmitAt([&] { ++ran; }, WorkerPool::Lane::kNormal, in_an_hour),
            WorkerPool::Admission::kQueued);
  ASSERT_EQ(pool.SubmitAt([&] { ++ran; }, WorkerPool::Lane::kYielding, in_an_hour),
            WorkerPool::Admission::kQueued);
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(pool.SubmitAt([] {}, WorkerPool::Lane::kNormal, in_an_hour),
            WorkerPool::Admission::kShuttingDown);
}

// Both identities at 1,000 operations a second, in both executions.
class TenantRateTest : public TenantFairnessTest,
                       public ::testing::WithParamInterface<std::string> {
 protected:
  TenantRateTest() {
    workers_ = 2;
    execution_ = GetParam();
    extra_limits_ = "max_operations_per_second_per_identity: 1000";
  }

  double Counter(const std::string& name) {
    for (const prometheus::MetricFamily& family :
         server_->server().metrics()->registry()->Collect()) {
      if (family.name == name) return family.metric.at(0).counter.value;
    }
    ADD_FAILURE() << "no " << name;
    return -1;
  }

  static v1::BatchRequest Claims(const std::string& prefix, int count) {
    v1::BatchRequest batch;
    for (int i = 0; i < count; ++i) {
      *batch.add_operations() = Op(ClaimOf(kNs, absl::StrCat(prefix, i), "w"));
    }
    return batch;
  }
  grpc::Status BatchAs(const char* token, const v1::BatchRequest& batch) {
    v1::BatchResponse response;
    grpc::Status status = stub().Batch(ContextOf(token).get(), batch, &response);
    if (status.ok()) {
      EXPECT_EQ(response.results_size(), batch.operations_size());
    }
    return status;
  }
};

// 2,000 operations at 1,000 a second, whether sent as Batches or on a
// Stream: the last Batch of 100 starts once the 1,900 before it are paid,
// less the 100 ms burst, at least 1.8 s after the first. B, sending less
// than a burst, is never held.
TEST_P(TenantRateTest, AnIdentityIsHeldToItsRateAndAnotherIsNotHeldByIt) {
  const Clock::time_point began = Clock::now();
  for (int round = 0; round < 10; ++round) {
    ASSERT_THAT(BatchAs(kTokenA, Claims(absl::StrCat("a-", round, "-"), 100)), IsOk());
  }
  OpenStream stream;
  ASSERT_THAT(Open(kTokenA, &stream), IsOk());  // One Query.
  for (int round = 0; round < 10; ++round) {
    v1::BatchRequest batch = Claims(absl::StrCat("s-", round, "-"), round == 0 ? 99 : 100);
    v1::BatchResponse response;
    ASSERT_TRUE(stream.stream->Write(batch));
    ASSERT_TRUE(stream.stream->Read(&response));
    ASSERT_EQ(response.results_size(), batch.operations_size());
  }
  Close(&stream);
  const double a_seconds = std::chrono::duration<double>(Clock::now() - began).count();
  EXPECT_GE(a_seconds, 1.8) << "A's 2,000 operations at 1,000 a second";
  // 100 claims take far less than the 100 ms they are charged, so A's
  // calls after the burst waited.
  const double paced = Counter("dedup_tasks_paced_total");
  EXPECT_GE(paced, 1);

  for (int i = 0; i < 20; ++i) ASSERT_THAT(ClaimAs(kTokenB, absl::StrCat("b-", i)), IsOk());
  ASSERT_THAT(BatchAs(kTokenB, Claims("b-batch-", 50)), IsOk());
  EXPECT_EQ(Counter("dedup_tasks_paced_total"), paced) << "B's 70 operations are within a burst";
  EXPECT_EQ(Counter("dedup_tasks_over_rate_total"), 0);
}

// At 100 operations a second, a Batch of 1,000 runs at once and books A
// ten seconds ahead: its next call is refused naming the limit, while B is
// served at once.
class TenantSlowRateTest : public TenantRateTest {
 protected:
  TenantSlowRateTest() { extra_limits_ = "max_operations_per_second_per_identity: 100"; }
};

TEST_P(TenantSlowRateTest, ACallBookedTooFarAheadIsRefusedAndOthersAreServed) {
  ASSERT_THAT(BatchAs(kTokenA, Claims("a-", 1000)), IsOk());
  const grpc::Status refused = ClaimAs(kTokenA, "a-more");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              ::testing::HasSubstr("limits.max_operations_per_second_per_identity: 100 "
                                   "operations a second of identity 'tenant-a'"));
  EXPECT_EQ(Counter("dedup_tasks_over_rate_total"), 1);
  ASSERT_THAT(ClaimAs(kTokenB, "b"), IsOk());
  EXPECT_EQ(Counter("dedup_tasks_paced_total"), 0);
}

const auto kExecutionName = [](const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
};
INSTANTIATE_TEST_SUITE_P(Execution, TenantRateTest, ::testing::Values("workers", "inline"),
                         kExecutionName);
INSTANTIATE_TEST_SUITE_P(Execution, TenantSlowRateTest, ::testing::Values("workers", "inline"),
                         kExecutionName);

}  // namespace
}  // namespace dedup::server::test
