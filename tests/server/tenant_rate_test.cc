// A rate per identity (limits.max_operations_per_second_per_identity,
// design.md §10): a tenant ahead of its rate waits for its time, one booked
// too far ahead is refused, and other tenants are neither held nor charged.
// The checks of time are lower bounds: a slow machine makes calls take
// longer, never shorter, so none of them can fail for being slow.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
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

// When a task of `operations` that `tenant` starts at `now` may run, with
// its wait bounded: nullopt when refused over its rate. The task is
// finished at once, so that only the rate holds it.
std::optional<Clock::time_point> RunsAt(TenantQuota& quota, const std::string& tenant,
                                        uint64_t operations, Clock::time_point now) {
  const TenantQuota::Started started = quota.Start(tenant, operations, now);
  if (started.start == TenantQuota::TaskStart::kOverRate) return std::nullopt;
  EXPECT_NE(started.start, TenantQuota::TaskStart::kRefused);
  quota.FinishTask(tenant);
  return started.not_before.value_or(now);
}

const Clock::time_point kT0(std::chrono::hours(1));

// At 1,000 operations a second, tasks of 10 take 10 ms each: the first
// 100 ms of them start at once, each later one 10 ms after the one before,
// and one that would wait more than kMaxRateWait is refused uncharged.
TEST(TenantQuotaTest, APacedTenantStartsAtItsRateAfterABurstAndIsRefusedFarAhead) {
  TenantQuota quota = PacedAt(1000);
  static_assert(TenantQuota::kRateBurst == milliseconds(100));
  static_assert(TenantQuota::kMaxRateWait == milliseconds(500));
  for (int n = 0; n <= 60; ++n) {
    const std::optional<Clock::time_point> start = RunsAt(quota, "a", 10, kT0);
    ASSERT_TRUE(start.has_value()) << "task " << n;
    EXPECT_EQ(*start, std::max(kT0, kT0 + milliseconds(10 * n) - milliseconds(100)))
        << "task " << n;
  }
  // The 62nd would start 510 ms from now.
  const TenantQuota::Started refused = quota.Start("a", 10, kT0);
  EXPECT_EQ(refused.start, TenantQuota::TaskStart::kOverRate);
  EXPECT_EQ(refused.not_before, kT0 + milliseconds(510));
  EXPECT_EQ(quota.tenants(), 0u) << "nothing held for it";
  // Nothing was charged for it: 20 ms later it waits 490 ms.
  EXPECT_EQ(RunsAt(quota, "a", 10, kT0 + milliseconds(20)), kT0 + milliseconds(510));
  // Another tenant, and callers without an identity, are not held by it.
  EXPECT_EQ(RunsAt(quota, "b", 10, kT0), kT0);
  EXPECT_EQ(RunsAt(quota, "", 1'000'000, kT0), kT0);
  EXPECT_EQ(RunsAt(quota, "", 1'000'000, kT0), kT0);
}

// A pause earns a burst again, but no more than one.
TEST(TenantQuotaTest, APauseEarnsOneBurstAndNoMore) {
  TenantQuota quota = PacedAt(1000);
  ASSERT_EQ(RunsAt(quota, "a", 500, kT0), kT0);
  // Paid until kT0 + 500 ms; ten seconds later, 100 ms of operations start
  // at once and the next waits.
  const Clock::time_point later = kT0 + std::chrono::seconds(10);
  EXPECT_EQ(RunsAt(quota, "a", 100, later), later);
  EXPECT_EQ(RunsAt(quota, "a", 10, later), later);
  EXPECT_EQ(RunsAt(quota, "a", 10, later), later + milliseconds(10));
}

// A call of no operations costs one; a refund gives the time back.
TEST(TenantQuotaTest, EmptyCallsCostOneAndRefundsGiveTimeBack) {
  TenantQuota quota = PacedAt(1000);
  for (int n = 0; n < 150; ++n) ASSERT_TRUE(RunsAt(quota, "a", 0, kT0).has_value());
  EXPECT_EQ(RunsAt(quota, "a", 0, kT0), kT0 + milliseconds(50));
  const TenantQuota::Started unrun = quota.Start("a", 300, kT0);
  EXPECT_EQ(unrun.start, TenantQuota::TaskStart::kShare);
  EXPECT_EQ(unrun.not_before, kT0 + milliseconds(51));
  quota.FinishTask("a");
  // It did not run: its time is given back, or the next would wait 351 ms.
  quota.Refund("a", 300);
  EXPECT_EQ(RunsAt(quota, "a", 1, kT0), kT0 + milliseconds(51));
}

// A call refused over its rate does not make its tenant active: another
// tenant alone stays within its share.
TEST(TenantQuotaTest, ACallRefusedOverItsRateCountsNothing) {
  TenantQuota quota = PacedAt(1000);
  // Booked 1,000 s ahead by one huge call (its operations are capped).
  ASSERT_EQ(RunsAt(quota, "a", 5'000'000, kT0), kT0);
  const Clock::time_point later = kT0 + std::chrono::seconds(10);
  for (int n = 0; n < 3; ++n) EXPECT_EQ(RunsAt(quota, "a", 1, later), std::nullopt);
  using Start = TenantQuota::TaskStart;
  EXPECT_EQ(quota.StartTask("b", 1, later), Start::kShare);
  EXPECT_EQ(quota.StartTask("b", 1, later), Start::kShare) << "b is alone: a is not active";
  quota.FinishTask("b");
  quota.FinishTask("b");
  EXPECT_EQ(quota.tenants(), 0u);
}

TEST(TenantQuotaTest, WithoutARateNothingIsPaced) {
  TenantQuota quota = PacedAt(0);
  for (int n = 0; n < 100; ++n) EXPECT_EQ(RunsAt(quota, "a", 1000, kT0), kT0);
}

// The tasks of SubmitAt count against the bound while they wait, may fill
// only half of it, and are run in the order of their times at Shutdown.
TEST(WorkerPoolTest, DelayedTasksCountAgainstTheBoundAndRunInTimeOrderAtShutdown) {
  WorkerPool pool(/*threads=*/1, /*max_queued=*/4, "test-worker", /*yielding_threads=*/1);
  absl::Notification started, release;
  ASSERT_EQ(pool.Submit([&] {
    started.Notify();
    release.WaitForNotification();
  }),
            WorkerPool::Admission::kQueued);
  started.WaitForNotification();
  absl::Mutex mu;
  std::vector<int> ran;
  const auto record = [&](int which) {
    return [&, which] {
      absl::MutexLock lock(&mu);
      ran.push_back(which);
    };
  };
  const Clock::time_point now = Clock::now();
  using Lane = WorkerPool::Lane;
  EXPECT_EQ(pool.SubmitAt(record(4), Lane::kNormal, now + std::chrono::hours(2)),
            WorkerPool::Admission::kQueued);
  EXPECT_EQ(pool.SubmitAt(record(3), Lane::kNormal, now + std::chrono::hours(1)),
            WorkerPool::Admission::kQueued);
  EXPECT_EQ(pool.SubmitAt(record(0), Lane::kYielding, now + std::chrono::hours(3)),
            WorkerPool::Admission::kFull)
      << "waiting tasks fill half the bound at most";
  EXPECT_EQ(pool.Submit(record(1)), WorkerPool::Admission::kQueued);
  EXPECT_EQ(pool.Submit(record(2)), WorkerPool::Admission::kQueued);
  EXPECT_EQ(pool.Submit(record(0)), WorkerPool::Admission::kFull);
  release.Notify();
  pool.Shutdown();
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3, 4}));
}

// A delayed task runs, and not before its time, whether it became the
// first to wait or came behind another.
TEST(WorkerPoolTest, ADelayedTaskRunsNotBeforeItsTime) {
  WorkerPool pool(/*threads=*/1, /*max_queued=*/8, "test-worker");
  const Clock::time_point submitted = Clock::now();
  absl::Notification first, second;
  std::atomic<Clock::duration> first_at{}, second_at{};
  ASSERT_EQ(pool.SubmitAt(
                [&] {
                  first_at = Clock::now() - submitted;
                  first.Notify();
                },
                WorkerPool::Lane::kNormal, submitted + milliseconds(300)),
            WorkerPool::Admission::kQueued);
  ASSERT_EQ(pool.SubmitAt(
                [&] {
                  second_at = Clock::now() - submitted;
                  second.Notify();
                },
                WorkerPool::Lane::kNormal, submitted + milliseconds(100)),
            WorkerPool::Admission::kQueued);
  first.WaitForNotification();
  second.WaitForNotification();
  EXPECT_GE(first_at.load(), milliseconds(300));
  EXPECT_GE(second_at.load(), milliseconds(100));
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
  const double paced = Counter("dedup_tasks_paced_total");

  for (int i = 0; i < 20; ++i) ASSERT_THAT(ClaimAs(kTokenB, absl::StrCat("b-", i)), IsOk());
  ASSERT_THAT(BatchAs(kTokenB, Claims("b-batch-", 50)), IsOk());
  EXPECT_EQ(Counter("dedup_tasks_paced_total"), paced) << "B's 70 operations are within a burst";
  EXPECT_EQ(Counter("dedup_tasks_over_rate_total"), 0);
}

// At one operation a second, a Batch of 1,000 runs at once and books A
// 1,000 s ahead: its next call is refused naming the limit, while B is
// served at once, and so is each item of its Stream's batches.
class TenantSlowRateTest : public TenantRateTest {
 protected:
  TenantSlowRateTest() { extra_limits_ = "max_operations_per_second_per_identity: 1"; }
};

TEST_P(TenantSlowRateTest, ACallBookedTooFarAheadIsRefusedAndOthersAreServed) {
  ASSERT_THAT(BatchAs(kTokenA, Claims("a-", 1000)), IsOk());
  const grpc::Status refused = ClaimAs(kTokenA, "a-more");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              ::testing::HasSubstr("limits.max_operations_per_second_per_identity: 1; "
                                   "identity 'tenant-a' is booked 99"));
  EXPECT_EQ(Counter("dedup_tasks_over_rate_total"), 1);
  ASSERT_THAT(ClaimAs(kTokenB, "b"), IsOk());
  EXPECT_EQ(Counter("dedup_tasks_paced_total"), 0);

  // On a Stream, each item of a batch over the rate is refused, and the
  // Stream goes on: refusing the batch would end it.
  OpenStream stream;
  ASSERT_THAT(Open(kTokenA, &stream), IsOk());
  v1::BatchRequest batch = Claims("s-", 3);
  batch.set_batch_id(7);
  v1::BatchResponse response;
  ASSERT_TRUE(stream.stream->Write(batch));
  ASSERT_TRUE(stream.stream->Read(&response)) << "the Stream is still open";
  EXPECT_EQ(response.batch_id(), 7u);
  ASSERT_EQ(response.results_size(), 3);
  for (const v1::OperationResult& result : response.results()) {
    EXPECT_EQ(result.error().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
    EXPECT_THAT(result.error().message(),
                ::testing::HasSubstr("limits.max_operations_per_second_per_identity: 1; "));
  }
  stream.stream->WritesDone();
  EXPECT_THAT(stream.stream->Finish(), IsOk());
  EXPECT_EQ(Counter("dedup_tasks_over_rate_total"), 3) << "the Query that opened it, the batch";
}

// One worker and a queue of two, of which waiting calls may take one, at
// 100 operations a second: a paced call the pool has no room for is
// refused, and its operations are given back to its identity's rate.
class TenantRateFullPoolTest : public TenantRateTest {
 protected:
  TenantRateFullPoolTest() {
    workers_ = 1;
    extra_limits_ = "max_operations_per_second_per_identity: 100 max_queued_tasks: 2";
  }
};

TEST_P(TenantRateFullPoolTest, ACallThePoolRefusesIsNotCharged) {
  absl::Notification started, release;
  ASSERT_EQ(server_->server().pool()->Submit([&] {
    started.Notify();
    release.WaitForNotification();
  }),
            WorkerPool::Admission::kQueued);
  started.WaitForNotification();
  // 20 operations queued (paid to 200 ms), then 20 more waiting for their
  // time (100 ms; paid to 400 ms): the queue is full.
  absl::Mutex mu;
  int answered = 0;
  std::vector<grpc::Status> held(2);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::BatchRequest> requests = {Claims("q-", 20), Claims("w-", 20)};
  std::vector<v1::BatchResponse> responses(2);
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(ContextOf(kTokenA));
    stub().async()->Batch(contexts[i].get(), &requests[i], &responses[i],
                          [&, i](grpc::Status status) {
                            absl::MutexLock lock(&mu);
                            held[i] = std::move(status);
                            ++answered;
                          });
    // Each admitted before the next is sent: the second is the one paced.
    const auto admitted = [&] {
      return i == 0 ? server_->server().tenants().tenants() > 0
                    : Counter("dedup_tasks_paced_total") == 1;
    };
    while (!admitted()) absl::SleepFor(absl::Milliseconds(1));
  }
  // 100 more would start at 300 ms, but the queue has no room.
  const grpc::Status refused = BatchAs(kTokenA, Claims("r-", 100));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("worker queue is full"));
  release.Notify();
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == 2; }, &answered));
    EXPECT_THAT(held[0], IsOk());
    EXPECT_THAT(held[1], IsOk());
  }
  // Given back, A is paid to 400 ms and 30 more start by 300 ms. Charged,
  // it would be paid to 1,400 ms, and they would be refused over the
  // rate (so long as this point is reached within 800 ms).
  EXPECT_THAT(BatchAs(kTokenA, Claims("c-", 30)), IsOk());
  EXPECT_EQ(Counter("dedup_tasks_over_rate_total"), 0);
}

const auto kExecutionName = [](const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
};
INSTANTIATE_TEST_SUITE_P(Execution, TenantRateTest, ::testing::Values("workers", "inline"),
                         kExecutionName);
INSTANTIATE_TEST_SUITE_P(Execution, TenantSlowRateTest, ::testing::Values("workers", "inline"),
                         kExecutionName);
// The worker execution: every call goes through the pool.
INSTANTIATE_TEST_SUITE_P(Execution, TenantRateFullPoolTest, ::testing::Values("workers"),
                         kExecutionName);

}  // namespace
}  // namespace dedup::server::test
