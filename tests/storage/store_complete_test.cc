#include <cstdint>

#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Complete, and the fencing of Complete, Release and Extend by the newest
// token: a stale worker changes nothing, the newest one may finish late.
namespace dedup::storage {
namespace {

TEST_F(StoreTest, CompleteStoresResultAndDuplicateClaimAnswersCompleted) {
  const uint64_t token = Acquire("order-1", "worker-a");
  clock_.AdvanceMs(500);
  const OpResult done = Do(Complete("order-1", token, "receipt-9"));
  EXPECT_EQ(done.outcome, Outcome::kOk);
  EXPECT_EQ(done.record.state, State::kCompleted);
  EXPECT_EQ(done.record.completed_ms, kStartMs + 500);
  EXPECT_EQ(done.record.retention_expires_ms, kStartMs + 500 + kRetentionMs);

  clock_.AdvanceMs(kRetentionMs - 1);  // The last moment of retention.
  const OpResult duplicate = Do(Claim("order-1", "worker-b"));
  EXPECT_EQ(duplicate.outcome, Outcome::kCompleted);
  EXPECT_EQ(duplicate.record.result, "receipt-9");
  EXPECT_EQ(duplicate.record.completed_ms, kStartMs + 500);
  EXPECT_EQ(duplicate.record.token, token);
}

TEST_F(StoreTest, CompleteRetryWithSameTokenAnswersAlreadyCompleted) {
  const uint64_t token = Acquire("order-1", "worker-a");
  ASSERT_EQ(Do(Complete("order-1", token, "first")).outcome, Outcome::kOk);

  const OpResult retry = Do(Complete("order-1", token, "second"));
  EXPECT_EQ(retry.outcome, Outcome::kAlreadyCompleted);
  EXPECT_EQ(retry.record.result, "first");
  EXPECT_EQ(Do(Query("order-1")).record.result, "first");
}

TEST_F(StoreTest, OldTokenIsStaleForCompleteReleaseAndExtendAfterTakeover) {
  const uint64_t old_token = Acquire("order-1", "worker-a");
  clock_.AdvanceMs(kLeaseMs);
  const uint64_t new_token = Acquire("order-1", "worker-b");
  ASSERT_GT(new_token, old_token);

  EXPECT_EQ(Do(Complete("order-1", old_token)).outcome, Outcome::kStaleToken);
  EXPECT_EQ(Do(Release("order-1", old_token)).outcome, Outcome::kStaleToken);
  EXPECT_EQ(Do(Extend("order-1", old_token)).outcome, Outcome::kStaleToken);

  // None of them touched the new holder's claim.
  const OpResult q = Do(Query("order-1"));
  EXPECT_EQ(q.record.state, State::kInProgress);
  EXPECT_EQ(q.record.owner, "worker-b");
  EXPECT_EQ(q.record.token, new_token);
  EXPECT_EQ(q.record.lease_expires_ms, kStartMs + 2 * kLeaseMs);
  EXPECT_EQ(Do(Complete("order-1", new_token)).outcome, Outcome::kOk);
  // A stale worker cannot complete over a finished key either.
  EXPECT_EQ(Do(Complete("order-1", old_token)).outcome, Outcome::kStaleToken);
}

TEST_F(StoreTest, CompleteWithNewestTokenAfterLeaseExpiredSucceedsIfNoOneClaimed) {
  const uint64_t token = Acquire("order-1", "worker-a");
  clock_.AdvanceMs(kLeaseMs + 10'000);
  ASSERT_EQ(Do(Query("order-1")).outcome, Outcome::kAbsent);

  const OpResult done = Do(Complete("order-1", token, "late but first"));
  EXPECT_EQ(done.outcome, Outcome::kOk);
  const OpResult duplicate = Do(Claim("order-1", "worker-b"));
  EXPECT_EQ(duplicate.outcome, Outcome::kCompleted);
  EXPECT_EQ(duplicate.record.result, "late but first");
}

TEST_F(StoreTest, ReleaseAndExtendWithNewestTokenSucceedAfterLeaseExpired) {
  const uint64_t released = Acquire("order-1", "worker-a");
  const uint64_t extended = Acquire("order-2", "worker-a");
  clock_.AdvanceMs(kLeaseMs + 1);

  EXPECT_EQ(Do(Release("order-1", released)).outcome, Outcome::kOk);
  EXPECT_EQ(Do(Query("order-1")).record.state, State::kReleased);

  const OpResult revived = Do(Extend("order-2", extended));
  EXPECT_EQ(revived.outcome, Outcome::kOk);
  EXPECT_EQ(Do(Claim("order-2", "worker-b")).outcome, Outcome::kInProgress);
}

}  // namespace
}  // namespace dedup::storage
