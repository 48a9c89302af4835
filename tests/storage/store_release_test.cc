#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Release and poisoning: a released key is claimed again with a larger
// token until max_attempts, then it is FAILED for its failed retention.
namespace dedup::storage {
namespace {

TEST_F(StoreTest, ReleaseThenReclaimGetsLargerToken) {
  const uint64_t first = Acquire("order-1", "worker-a");
  const OpResult released = Do(Release("order-1", first));
  EXPECT_EQ(released.outcome, Outcome::kOk);
  EXPECT_EQ(Do(Query("order-1")).record.state, State::kReleased);

  const OpResult again = Do(Claim("order-1", "worker-b"));
  EXPECT_EQ(again.outcome, Outcome::kAcquired);
  EXPECT_FALSE(again.takeover);
  EXPECT_GT(again.record.token, first);
  EXPECT_EQ(again.record.attempts, 2u);
}

TEST_F(StoreTest, ReleaseRetryWithSameTokenAnswersAsTheFirstTime) {
  const uint64_t token = Acquire("order-1", "worker-a");
  ASSERT_EQ(Do(Release("order-1", token)).outcome, Outcome::kOk);
  clock_.AdvanceMs(1'000);

  // The response was lost; the client retries.
  const OpResult retry = Do(Release("order-1", token));
  EXPECT_EQ(retry.outcome, Outcome::kOk);
  const OpResult q = Do(Query("order-1"));
  EXPECT_EQ(q.record.state, State::kReleased);
  EXPECT_EQ(q.record.attempts, 1u);
  EXPECT_EQ(q.record.updated_ms, kStartMs);  // The retry changed nothing.

  // Once someone claims again, the old token is stale for Release too.
  const uint64_t next = Acquire("order-1", "worker-b");
  EXPECT_GT(next, token);
  EXPECT_EQ(Do(Release("order-1", token)).outcome, Outcome::kStaleToken);
  EXPECT_EQ(Do(Query("order-1")).record.state, State::kInProgress);
}

TEST_F(StoreTest, PoisoningReleaseRetryAnswersFailedAgain) {
  const uint64_t token = Acquire("order-1", "worker-a");
  ASSERT_EQ(Do(Release("order-1", token, /*max_attempts=*/1)).outcome, Outcome::kFailed);
  EXPECT_EQ(Do(Release("order-1", token, /*max_attempts=*/1)).outcome, Outcome::kFailed);
  EXPECT_EQ(Do(Release("order-1", token + 1, /*max_attempts=*/1)).outcome, Outcome::kStaleToken);
  EXPECT_EQ(Do(Query("order-1")).record.state, State::kFailed);
}

TEST_F(StoreTest, ReleaseAtMaxAttemptsAnswersFailedAndPoisonsKey) {
  for (uint32_t attempt = 1; attempt < kMaxAttempts; ++attempt) {
    const uint64_t token = Acquire("order-1", "worker-" + std::to_string(attempt));
    ASSERT_EQ(Do(Release("order-1", token)).outcome, Outcome::kOk) << attempt;
  }
  const uint64_t last = Acquire("order-1", "worker-last");
  const OpResult poisoned = Do(Release("order-1", last));
  EXPECT_EQ(poisoned.outcome, Outcome::kFailed);
  EXPECT_EQ(poisoned.record.state, State::kFailed);

  EXPECT_EQ(Do(Query("order-1")).record.state, State::kFailed);
  EXPECT_EQ(Do(Claim("order-1", "worker-next")).outcome, Outcome::kFailed);
  clock_.AdvanceMs(kFailedRetentionMs - 1);  // Kept for its retention.
  EXPECT_EQ(Do(Claim("order-1", "worker-next")).outcome, Outcome::kFailed);
}

TEST_F(StoreTest, PoisonedKeyCannotBeCompletedOrExtendedByItsLastHolder) {
  const uint64_t token = Acquire("order-1", "worker-a");
  ASSERT_EQ(Do(Release("order-1", token, /*max_attempts=*/1)).outcome, Outcome::kFailed);

  EXPECT_EQ(Do(Complete("order-1", token)).outcome, Outcome::kStaleToken);
  EXPECT_EQ(Do(Extend("order-1", token)).outcome, Outcome::kStaleToken);
  EXPECT_EQ(Do(Query("order-1")).record.state, State::kFailed);
}

TEST_F(StoreTest, ClaimOverExpiredLeaseAtMaxAttemptsPoisonsKey) {
  uint64_t last_token = 0;
  for (uint32_t attempt = 1; attempt <= kMaxAttempts; ++attempt) {
    last_token = Acquire("order-1", "worker-" + std::to_string(attempt));
    clock_.AdvanceMs(kLeaseMs);  // Each worker dies holding the lease.
  }
  const OpResult r = Do(Claim("order-1", "worker-next"));
  EXPECT_EQ(r.outcome, Outcome::kFailed);

  const OpResult q = Do(Query("order-1"));
  EXPECT_EQ(q.outcome, Outcome::kFound);
  EXPECT_EQ(q.record.state, State::kFailed);
  EXPECT_EQ(q.record.retention_expires_ms, clock_.NowMs() + kFailedRetentionMs);
  // No new token was handed out for a key that could not be claimed.
  EXPECT_EQ(q.record.token, last_token);
  EXPECT_EQ(Do(Claim("order-1", "worker-other")).outcome, Outcome::kFailed);
}

TEST_F(StoreTest, PoisonedKeyIsForgottenAfterFailedRetention) {
  const uint64_t token = Acquire("order-1", "worker-a");
  ASSERT_EQ(Do(Release("order-1", token, /*max_attempts=*/1)).outcome, Outcome::kFailed);
  clock_.AdvanceMs(kFailedRetentionMs);

  EXPECT_EQ(Do(Query("order-1")).outcome, Outcome::kAbsent);
  const OpResult r = Do(Claim("order-1", "worker-b"));
  EXPECT_EQ(r.outcome, Outcome::kAcquired);
  EXPECT_GT(r.record.token, token);
  EXPECT_EQ(r.record.attempts, 1u);
}

}  // namespace
}  // namespace dedup::storage
