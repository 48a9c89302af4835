#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "storage/clock.h"
#include "storage/storage_time.h"
#include "storage/store.h"
#include "storage/testing/rocksdb_env.h"
#include "tests/common/history_checker.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Wall-clock steps (design.md §5, "Clock"; README "Reliability"). Storage
// time follows the monotonic clock from a persisted high-water mark and
// follows the wall clock only while the two agree within a tolerance, so:
//   - a forward step counts as at most the tolerance until confirmed, and
//     not at all for compaction: no COMPLETED record is dropped, or read as
//     gone, before its retention has passed in elapsed time, and no live
//     lease ends early by more than the tolerance;
//   - a backward step does not stretch leases: they end after their length
//     in elapsed time;
//   - storage time never goes backwards, across restarts either.
//
// DEDUP_FAULT_ROLLBACK=unprotected_clock runs these tests against a broken
// store that reads the raw wall clock; they must then fail.
namespace dedup::storage {
namespace {

constexpr int64_t kSecondMs = 1000;
constexpr int64_t kMinuteMs = 60 * kSecondMs;
constexpr int64_t kHourMs = 60 * kMinuteMs;
constexpr int64_t kToleranceMs = kSecondMs;
constexpr int64_t kConfirmationMs = 10 * kMinuteMs;

bool RollbackRequested() {
  const char* rollback = std::getenv("DEDUP_FAULT_ROLLBACK");
  return rollback != nullptr && std::string(rollback) == "unprotected_clock";
}

// StorageTime alone, over a manual clock, with a mark kept in memory.
class StorageTimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    time_.Start(0, [this](int64_t mark) {
      persisted_.push_back(mark);
      return absl::OkStatus();
    });
  }

  ManualClock clock_{kStartMs};
  StorageTime time_{&clock_, kToleranceMs, kConfirmationMs};
  std::vector<int64_t> persisted_;
};

TEST_F(StorageTimeTest, FollowsTheWallClockWhileItAgrees) {
  EXPECT_EQ(time_.NowMs(), kStartMs);
  clock_.AdvanceMs(5 * kMinuteMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + 5 * kMinuteMs);
  // Steps within the tolerance (NTP slewing, small corrections) are
  // followed, forward at once and backward as far as "never backwards".
  clock_.StepMs(kToleranceMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + 5 * kMinuteMs + kToleranceMs);
  clock_.StepMs(-kToleranceMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + 5 * kMinuteMs + kToleranceMs);
  clock_.AdvanceMs(2 * kToleranceMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + 5 * kMinuteMs + 2 * kToleranceMs);
  EXPECT_EQ(time_.forward_step_readings(), 0u);
  EXPECT_EQ(time_.backward_step_readings(), 0u);
}

TEST_F(StorageTimeTest, ForwardStepCountsAsToleranceUntilConfirmed) {
  clock_.StepMs(kHourMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + kToleranceMs);
  EXPECT_EQ(time_.CompactionNowMs(), kStartMs);
  clock_.AdvanceMs(kConfirmationMs - 1);
  EXPECT_EQ(time_.NowMs(), kStartMs + kToleranceMs + kConfirmationMs - 1);
  EXPECT_EQ(time_.CompactionNowMs(), kStartMs + kConfirmationMs - 1);
  EXPECT_GT(time_.forward_step_readings(), 0u);
  // Ahead at every reading for the whole confirmation period: taken.
  clock_.AdvanceMs(1);
  EXPECT_EQ(time_.NowMs(), kStartMs + kHourMs + kConfirmationMs);
  EXPECT_EQ(time_.CompactionNowMs(), kStartMs + kHourMs + kConfirmationMs);
}

TEST_F(StorageTimeTest, ForwardStepUndoneBeforeConfirmationIsNeverTaken) {
  clock_.StepMs(kHourMs);
  clock_.AdvanceMs(kConfirmationMs / 2);
  EXPECT_EQ(time_.NowMs(), kStartMs + kToleranceMs + kConfirmationMs / 2);
  clock_.StepMs(-kHourMs);
  // The wall clock is back on the reference; time waits for it to pass
  // the tolerance already counted, never going back.
  EXPECT_EQ(time_.NowMs(), kStartMs + kToleranceMs + kConfirmationMs / 2);
  clock_.AdvanceMs(kConfirmationMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + kConfirmationMs / 2 + kConfirmationMs);
  // A second step starts its confirmation afresh.
  clock_.StepMs(kHourMs);
  clock_.AdvanceMs(kConfirmationMs / 2);
  EXPECT_LT(time_.NowMs(), kStartMs + kHourMs);
}

TEST_F(StorageTimeTest, BackwardStepKeepsCountingElapsedTime) {
  clock_.AdvanceMs(kMinuteMs);
  clock_.StepMs(-kHourMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + kMinuteMs);
  clock_.AdvanceMs(10 * kMinuteMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + 11 * kMinuteMs);
  EXPECT_EQ(time_.CompactionNowMs(), kStartMs + 11 * kMinuteMs);
  EXPECT_GT(time_.backward_step_readings(), 0u);
  // Never confirmed: however long the wall clock stays behind, time runs
  // at the monotonic rate, and follows the wall clock again once it is
  // back within the tolerance.
  clock_.AdvanceMs(kHourMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + kHourMs + 11 * kMinuteMs);
  clock_.StepMs(kHourMs - 10);
  EXPECT_EQ(time_.NowMs(), kStartMs + kHourMs + 11 * kMinuteMs);
  clock_.AdvanceMs(kMinuteMs);
  EXPECT_EQ(time_.NowMs(), clock_.NowMs());
}

TEST_F(StorageTimeTest, PersistsTheMarkAheadBeforeHandingOutTime) {
  EXPECT_EQ(time_.NowMs(), kStartMs);
  ASSERT_EQ(persisted_.size(), 1u);
  EXPECT_EQ(persisted_.back(), kStartMs + kToleranceMs);
  // Within the mark: no write.
  clock_.AdvanceMs(kToleranceMs);
  EXPECT_EQ(time_.NowMs(), kStartMs + kToleranceMs);
  EXPECT_EQ(persisted_.size(), 1u);
  clock_.AdvanceMs(1);
  EXPECT_EQ(time_.NowMs(), kStartMs + kToleranceMs + 1);
  EXPECT_EQ(persisted_.back(), kStartMs + 2 * kToleranceMs + 1);
  EXPECT_EQ(time_.MarkMs(), persisted_.back());
}

TEST(StorageTimeMarkTest, StandsStillAtTheMarkWhenItCannotBePersisted) {
  ManualClock clock(kStartMs);
  StorageTime time(&clock, kToleranceMs, kConfirmationMs);
  bool fail = false;
  time.Start(kStartMs + kToleranceMs, [&fail](int64_t /*mark*/) {
    return fail ? absl::UnavailableError("disk full") : absl::OkStatus();
  });
  fail = true;
  clock.AdvanceMs(kMinuteMs);
  EXPECT_EQ(time.NowMs(), kStartMs + kToleranceMs);
  EXPECT_EQ(time.CompactionNowMs(), kStartMs + kToleranceMs);
  fail = false;
  EXPECT_EQ(time.NowMs(), kStartMs + kMinuteMs);
}

TEST(StorageTimeMarkTest, ResumesAtTheStoredMarkWhenTheWallClockIsBehind) {
  ManualClock clock(kStartMs);
  StorageTime time(&clock, kToleranceMs, kConfirmationMs);
  time.Start(kStartMs + kHourMs, [](int64_t /*mark*/) { return absl::OkStatus(); });
  EXPECT_EQ(time.NowMs(), kStartMs + kHourMs);
  clock.AdvanceMs(kMinuteMs);
  EXPECT_EQ(time.NowMs(), kStartMs + kHourMs + kMinuteMs);
}

// The store under load while the wall clock steps +1 h and back.
class StoreClockStepTest : public StoreTest {
 protected:
  StoreOptions ClockOptions(bool unprotected) const {
    StoreOptions options = Options();
    options.clock_step_tolerance_ms = kToleranceMs;
    options.clock_step_confirmation_ms = kConfirmationMs;
    if (unprotected) SetUnprotectedClockForTesting(&options);
    return options;
  }
};

// What one run of the clock-step scenario saw.
struct StepReport {
  std::vector<std::string> history_violations;
  int duplicates = 0;              // Redeliveries of completed keys answered ACQUIRED.
  uint64_t completed_dropped = 0;  // By compaction, all within retention.
  size_t completed_missing = 0;    // Acknowledged completes not read back.
  int early_lease_ends = 0;        // Live leases another owner took.
  int stretched_leases = 0;        // Ended leases still refusing others.
  size_t ops = 0;
  std::string Summary() const {
    return absl::StrCat(ops, " operations; duplicates let through: ", duplicates,
                        "; history violations: ", history_violations.size(),
                        "; COMPLETED records dropped by compaction within retention: ",
                        completed_dropped, "; acknowledged completes missing: ", completed_missing,
                        "; live leases ended early: ", early_lease_ends,
                        "; ended leases stretched: ", stretched_leases);
  }
};

// Records a history of claims and completes from several threads, ordered
// by one counter.
class Recorder {
 public:
  int64_t Tick() { return clock_.fetch_add(1); }
  void Add(test::HistoryOp op) {
    absl::MutexLock lock(&mu_);
    history_.push_back(std::move(op));
  }
  std::vector<test::HistoryOp> history() const {
    absl::MutexLock lock(&mu_);
    return history_;
  }

 private:
  std::atomic<int64_t> clock_{0};
  mutable absl::Mutex mu_;
  std::vector<test::HistoryOp> history_ ABSL_GUARDED_BY(mu_);
};

test::HistoryOp::Answer ClaimAnswer(Outcome outcome) {
  switch (outcome) {
    case Outcome::kAcquired:
      return test::HistoryOp::Answer::kAcquired;
    case Outcome::kInProgress:
      return test::HistoryOp::Answer::kInProgress;
    case Outcome::kCompleted:
      return test::HistoryOp::Answer::kCompleted;
    case Outcome::kFailed:
      return test::HistoryOp::Answer::kFailed;
    case Outcome::kOk:
      return test::HistoryOp::Answer::kOk;
    case Outcome::kAlreadyCompleted:
      return test::HistoryOp::Answer::kAlreadyCompleted;
    case Outcome::kStaleToken:
      return test::HistoryOp::Answer::kStaleToken;
    case Outcome::kNotFound:
      return test::HistoryOp::Answer::kNotFound;
    default:
      return test::HistoryOp::Answer::kMismatch;
  }
}

// Claims `key` for `owner` through `store`, recording the call.
OpResult RecordedClaim(Store* store, Recorder* recorder, const std::string& key,
                       const std::string& owner, int64_t lease_ms = kLeaseMs) {
  test::HistoryOp h;
  h.kind = test::HistoryOp::Kind::kClaim;
  h.key = key;
  h.owner = owner;
  h.invoked = recorder->Tick();
  ClaimOp claim = Claim(key, owner);
  claim.lease_ms = lease_ms;
  absl::StatusOr<OpResult> r = store->Apply(claim);
  h.returned = recorder->Tick();
  if (r.ok()) {
    h.answer = ClaimAnswer(r->outcome);
    if (r->outcome == Outcome::kAcquired || r->outcome == Outcome::kCompleted) {
      h.token = r->record.token;
    }
    if (r->outcome == Outcome::kCompleted) h.result = r->record.result;
  }
  recorder->Add(h);
  return r.ok() ? *r : OpResult{};
}

OpResult RecordedComplete(Store* store, Recorder* recorder, const std::string& key, uint64_t token,
                          int64_t retention_ms) {
  test::HistoryOp h;
  h.kind = test::HistoryOp::Kind::kComplete;
  h.key = key;
  h.token = token;
  h.result = absl::StrCat("receipt-", key);
  h.invoked = recorder->Tick();
  absl::StatusOr<OpResult> r = store->Apply(Complete(key, token, h.result, retention_ms));
  h.returned = recorder->Tick();
  if (r.ok()) h.answer = ClaimAnswer(r->outcome);
  recorder->Add(h);
  return r.ok() ? *r : OpResult{};
}

// Two writers claim and complete fresh keys and claim earlier ones again,
// while the main thread moves time (only forward in elapsed time: the wall
// clock steps +1 h, then -1 h), compacts, and probes leases:
//   - "lease-before", taken 1 min before the step for 5 min, must stay with
//     its holder through the step (until 5 min have really passed);
//   - "lease-during", taken during the step for 5 min, must be free again
//     once 5 min and the tolerance have really passed.
// Elapsed time stays below the retention (30 min), so every acknowledged
// Complete must stay readable and undropped.
StepReport RunClockSteps(Store* store, ManualClock* clock) {
  constexpr int64_t kRetention = 30 * kMinuteMs;
  constexpr int64_t kLease = 5 * kMinuteMs;
  Recorder recorder;
  StepReport report;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> rounds{0};  // Of the writers' loops.
  std::atomic<int> duplicates{0};  // Redeliveries of completed keys acquired.
  absl::Mutex done_mu;
  std::map<std::string, uint64_t> completed;  // Acknowledged, with token.
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      std::vector<std::string> mine;
      for (int i = 0; !stop.load(); ++i) {
        const std::string key = absl::StrCat("order-", w, "-", i);
        const std::string owner = absl::StrCat("writer-", w);
        const OpResult claimed = RecordedClaim(store, &recorder, key, owner);
        if (claimed.outcome == Outcome::kAcquired) {
          const OpResult done =
              RecordedComplete(store, &recorder, key, claimed.record.token, kRetention);
          if (done.outcome == Outcome::kOk) {
            mine.push_back(key);
            absl::MutexLock lock(&done_mu);
            completed[key] = claimed.record.token;
          }
        }
        // A redelivery of an earlier message, by another consumer.
        if (!mine.empty()) {
          const std::string& again = mine[static_cast<size_t>(i) * 7919 % mine.size()];
          const OpResult r = RecordedClaim(store, &recorder, again, absl::StrCat("redelivery-", w));
          if (r.outcome == Outcome::kAcquired) ++duplicates;
        }
        ++rounds;
      }
    });
  }
  // Elapsed time passes in steps of 1 s, giving the writers time to work.
  const auto pass = [&](int64_t ms) {
    for (int64_t passed = 0; passed < ms; passed += kSecondMs) {
      clock->AdvanceMs(kSecondMs);
      const int64_t target = rounds.load() + 2;
      while (rounds.load() < target) std::this_thread::yield();
    }
  };
  const auto other_claims = [&](const std::string& key) {
    return store->Apply(Claim(key, "probe")).value_or(OpResult{}).outcome;
  };

  pass(30 * kSecondMs);
  ClaimOp before = Claim("lease-before", "holder");
  before.lease_ms = kLease;
  EXPECT_EQ(store->Apply(before).value_or(OpResult{}).outcome, Outcome::kAcquired);
  pass(kMinuteMs);

  clock->StepMs(kHourMs);
  (void)store->CompactAll();
  ClaimOp during = Claim("lease-during", "holder");
  during.lease_ms = kLease;
  EXPECT_EQ(store->Apply(during).value_or(OpResult{}).outcome, Outcome::kAcquired);
  if (other_claims("lease-before") != Outcome::kInProgress) ++report.early_lease_ends;
  pass(2 * kMinuteMs);
  (void)store->CompactAll();
  if (other_claims("lease-before") != Outcome::kInProgress) ++report.early_lease_ends;

  clock->StepMs(-kHourMs);
  (void)store->CompactAll();
  // lease-before: 3 min of its 5 have passed.
  if (other_claims("lease-before") != Outcome::kInProgress) ++report.early_lease_ends;
  pass(3 * kMinuteMs + 2 * kToleranceMs);
  // lease-during: more than 5 min and the tolerance have passed.
  if (other_claims("lease-during") != Outcome::kAcquired) ++report.stretched_leases;
  pass(kMinuteMs);
  stop = true;
  for (std::thread& t : writers) t.join();

  (void)store->CompactAll();
  report.completed_dropped = store->compaction_drops().completed.load();
  report.duplicates = duplicates.load();
  for (const auto& [key, token] : completed) {
    const OpResult r = store->Apply(Query(key)).value_or(OpResult{});
    if (r.record.state != State::kCompleted || r.record.token != token) {
      ++report.completed_missing;
    }
  }
  const std::vector<test::HistoryOp> history = recorder.history();
  report.ops = history.size();
  report.history_violations = test::CheckHistory(history);
  return report;
}

TEST_F(StoreClockStepTest, StepsUnderLoadDropNothingEarlyAndLetNoDuplicateThrough) {
  ASSERT_NO_FATAL_FAILURE(Open(ClockOptions(RollbackRequested())));
  const StepReport report = RunClockSteps(store_.get(), &clock_);
  std::printf("[ clock steps ] %s\n", report.Summary().c_str());
  EXPECT_GT(report.ops, 0u);
  EXPECT_EQ(report.history_violations.size(), 0u)
      << "first violations:\n"
      << absl::StrJoin(report.history_violations.begin(),
                       report.history_violations.begin() +
                           std::min<size_t>(report.history_violations.size(), 3),
                       "\n");
  EXPECT_EQ(report.duplicates, 0);
  EXPECT_EQ(report.completed_dropped, 0u);
  EXPECT_EQ(report.completed_missing, 0u);
  EXPECT_EQ(report.early_lease_ends, 0);
  EXPECT_EQ(report.stretched_leases, 0);
}

// Fault rollback, run every time: the same scenario against a store that
// reads the raw wall clock must show the damage the rule prevents.
TEST_F(StoreClockStepTest, UnprotectedClockIsCaughtDroppingCompletedRecords) {
  ASSERT_NO_FATAL_FAILURE(Open(ClockOptions(/*unprotected=*/true)));
  const StepReport report = RunClockSteps(store_.get(), &clock_);
  std::printf("[ clock steps ] unprotected: %s\n", report.Summary().c_str());
  EXPECT_GT(report.duplicates, 0);
  EXPECT_FALSE(report.history_violations.empty());
  EXPECT_GT(report.completed_dropped, 0u);
  EXPECT_GT(report.early_lease_ends, 0);
  EXPECT_GT(report.stretched_leases, 0);
}

TEST_F(StoreClockStepTest, TimeNeverGoesBackwardsAcrossRestarts) {
  const bool unprotected = RollbackRequested();
  ASSERT_NO_FATAL_FAILURE(Open(ClockOptions(unprotected)));
  clock_.AdvanceMs(kMinuteMs);
  const uint64_t token = Acquire("lease", "holder");
  const int64_t before = store_->NowMs();

  // Restarted with the wall clock stepped back an hour.
  Close();
  clock_.StepMs(-kHourMs);
  ASSERT_NO_FATAL_FAILURE(Open(ClockOptions(unprotected)));
  EXPECT_GE(store_->NowMs(), before);
  // The lease is still live within its length...
  EXPECT_EQ(Do(Claim("lease", "other")).outcome, Outcome::kInProgress);
  // ...and ends after it (and at most the tolerance the mark ran ahead),
  // not an hour later.
  clock_.AdvanceMs(kLeaseMs + kToleranceMs);
  const OpResult r = Do(Claim("lease", "other"));
  EXPECT_EQ(r.outcome, Outcome::kAcquired);
  EXPECT_GT(r.record.token, token);
}

TEST_F(StoreClockStepTest, ConfirmedForwardStepIsTaken) {
  ASSERT_NO_FATAL_FAILURE(Open(ClockOptions(RollbackRequested())));
  const uint64_t token = Acquire("order", "worker");
  ASSERT_EQ(Do(Complete("order", token, "receipt", 30 * kMinuteMs)).outcome, Outcome::kOk);
  clock_.StepMs(kHourMs);
  EXPECT_EQ(Do(Claim("order", "redelivery")).outcome, Outcome::kCompleted);
  // The wall clock stays ahead, read every minute, for the confirmation
  // period: then it was right, and the retention has passed.
  for (int64_t passed = 0; passed < kConfirmationMs; passed += kMinuteMs) {
    clock_.AdvanceMs(kMinuteMs);
    if (passed + kMinuteMs < kConfirmationMs) {
      EXPECT_EQ(Do(Query("order")).outcome, Outcome::kFound) << passed;
    }
  }
  EXPECT_EQ(Do(Query("order")).outcome, Outcome::kAbsent);
  EXPECT_GE(store_->NowMs(), clock_.NowMs());
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(store_->compaction_drops().completed.load(), 1u);
}

}  // namespace
}  // namespace dedup::storage
