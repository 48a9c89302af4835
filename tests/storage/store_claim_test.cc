#include <cstdint>

#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Claim: who acquires a key, with which token and lease, who is told it is
// in progress, and how a fingerprint guards a key against a different request.
namespace dedup::storage {
namespace {

TEST_F(StoreTest, ClaimOfNewKeyAcquiresWithTokenAndLease) {
  const OpResult r = Do(Claim("order-1", "worker-a"));

  EXPECT_EQ(r.outcome, Outcome::kAcquired);
  EXPECT_FALSE(r.takeover);
  EXPECT_GT(r.record.token, 0u);
  EXPECT_EQ(r.record.state, State::kInProgress);
  EXPECT_EQ(r.record.owner, "worker-a");
  EXPECT_EQ(r.record.lease_expires_ms, kStartMs + kLeaseMs);
  EXPECT_EQ(r.record.attempts, 1u);
  EXPECT_EQ(r.record.created_ms, kStartMs);

  const OpResult q = Do(Query("order-1"));
  EXPECT_EQ(q.outcome, Outcome::kFound);
  EXPECT_EQ(q.record.state, State::kInProgress);
  EXPECT_EQ(q.record.token, r.record.token);
  EXPECT_EQ(q.record.ns, kNs);
  EXPECT_EQ(q.record.key, "order-1");
}

TEST_F(StoreTest, ReentrantClaimBySameOwnerReturnsSameToken) {
  const OpResult first = Do(Claim("order-1", "worker-a"));
  clock_.AdvanceMs(1'000);
  const OpResult again = Do(Claim("order-1", "worker-a"));

  EXPECT_EQ(again.outcome, Outcome::kAcquired);
  EXPECT_EQ(again.record.token, first.record.token);
  EXPECT_EQ(again.record.lease_expires_ms, first.record.lease_expires_ms);
  EXPECT_EQ(again.record.attempts, 1u);
  EXPECT_FALSE(again.takeover);
}

TEST_F(StoreTest, ClaimOfLiveLeaseByOtherOwnerAnswersInProgress) {
  const OpResult held = Do(Claim("order-1", "worker-a"));
  clock_.AdvanceMs(kLeaseMs - 1);
  const OpResult r = Do(Claim("order-1", "worker-b"));

  EXPECT_EQ(r.outcome, Outcome::kInProgress);
  EXPECT_EQ(r.record.owner, "worker-a");
  EXPECT_EQ(r.record.lease_expires_ms, held.record.lease_expires_ms);
  // The holder keeps the key.
  EXPECT_EQ(Do(Query("order-1")).record.owner, "worker-a");
}

TEST_F(StoreTest, ExpiredLeaseIsTakenOverByOtherOwnerWithLargerToken) {
  const uint64_t first = Acquire("order-1", "worker-a");
  clock_.AdvanceMs(kLeaseMs);  // The lease ends at this instant.
  const OpResult r = Do(Claim("order-1", "worker-b"));

  EXPECT_EQ(r.outcome, Outcome::kAcquired);
  EXPECT_TRUE(r.takeover);
  EXPECT_GT(r.record.token, first);
  EXPECT_EQ(r.record.owner, "worker-b");
  EXPECT_EQ(r.record.attempts, 2u);
  EXPECT_EQ(r.record.lease_expires_ms, kStartMs + 2 * kLeaseMs);
}

TEST_F(StoreTest, ExtendMovesLeaseExpiryAndKeepsKeyFromTakeover) {
  const uint64_t token = Acquire("order-1", "worker-a");
  clock_.AdvanceMs(20'000);
  const OpResult extended = Do(Extend("order-1", token, 60'000));
  EXPECT_EQ(extended.outcome, Outcome::kOk);
  EXPECT_EQ(extended.record.lease_expires_ms, kStartMs + 20'000 + 60'000);

  clock_.AdvanceMs(40'000);  // Past the original lease, inside the new one.
  const OpResult r = Do(Claim("order-1", "worker-b"));
  EXPECT_EQ(r.outcome, Outcome::kInProgress);
  EXPECT_EQ(r.record.lease_expires_ms, kStartMs + 80'000);

  clock_.AdvanceMs(20'000);  // The new lease ends.
  EXPECT_EQ(Do(Claim("order-1", "worker-b")).outcome, Outcome::kAcquired);
}

TEST_F(StoreTest, DifferentFingerprintAnswersMismatch) {
  ASSERT_EQ(Do(Claim("order-1", "worker-a", "sha-1")).outcome, Outcome::kAcquired);
  EXPECT_EQ(Do(Claim("order-1", "worker-b", "sha-2")).outcome, Outcome::kMismatch);
  EXPECT_EQ(Do(Claim("order-1", "worker-a", "sha-2")).outcome, Outcome::kMismatch);

  const uint64_t token = Do(Query("order-1")).record.token;
  ASSERT_EQ(Do(Complete("order-1", token, "receipt")).outcome, Outcome::kOk);
  const OpResult r = Do(Claim("order-1", "worker-b", "sha-2"));
  EXPECT_EQ(r.outcome, Outcome::kMismatch);
  EXPECT_EQ(r.record.result, "receipt");  // Diagnosable, but not a replay.
}

TEST_F(StoreTest, SameOrEmptyFingerprintIsNoMismatch) {
  ASSERT_EQ(Do(Claim("order-1", "worker-a", "sha-1")).outcome, Outcome::kAcquired);
  EXPECT_EQ(Do(Claim("order-1", "worker-b", "sha-1")).outcome, Outcome::kInProgress);
  EXPECT_EQ(Do(Claim("order-1", "worker-b", "")).outcome, Outcome::kInProgress);

  const uint64_t token = Do(Query("order-1")).record.token;
  ASSERT_EQ(Do(Complete("order-1", token, "receipt")).outcome, Outcome::kOk);
  EXPECT_EQ(Do(Claim("order-1", "worker-b", "sha-1")).outcome, Outcome::kCompleted);
  EXPECT_EQ(Do(Claim("order-1", "worker-b", "")).outcome, Outcome::kCompleted);

  // A key claimed without a fingerprint accepts any.
  ASSERT_EQ(Do(Claim("order-2", "worker-a", "")).outcome, Outcome::kAcquired);
  EXPECT_EQ(Do(Claim("order-2", "worker-b", "sha-9")).outcome, Outcome::kInProgress);
}

}  // namespace
}  // namespace dedup::storage
