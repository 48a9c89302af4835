#include <cstdint>

#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Expiry and absence: what a key reads as once its lease or retention has
// ended, or when it was never claimed, and namespaces kept apart.
namespace dedup::storage {
namespace {

TEST_F(StoreTest, RetentionEndForgetsCompletedKeyAndNewClaimGetsLargerToken) {
  const uint64_t first = Acquire("order-1", "worker-a");
  ASSERT_EQ(Do(Complete("order-1", first, "receipt")).outcome, Outcome::kOk);
  clock_.AdvanceMs(kRetentionMs);

  EXPECT_EQ(Do(Query("order-1")).outcome, Outcome::kAbsent);
  const OpResult r = Do(Claim("order-1", "worker-b"));
  EXPECT_EQ(r.outcome, Outcome::kAcquired);
  EXPECT_FALSE(r.takeover);
  EXPECT_GT(r.record.token, first);
  EXPECT_EQ(r.record.attempts, 1u);
  EXPECT_EQ(r.record.result, "");
}

TEST_F(StoreTest, CompleteReleaseExtendOfNeverClaimedKeyAnswerNotFound) {
  EXPECT_EQ(Do(Complete("never", 1)).outcome, Outcome::kNotFound);
  EXPECT_EQ(Do(Release("never", 1)).outcome, Outcome::kNotFound);
  EXPECT_EQ(Do(Extend("never", 1)).outcome, Outcome::kNotFound);
  // And none of them created the key.
  const OpResult q = Do(Query("never"));
  EXPECT_EQ(q.outcome, Outcome::kAbsent);
  EXPECT_EQ(q.record.token, 0u);
}

TEST_F(StoreTest, QueryOfExpiredLeaseReadsAbsent) {
  const uint64_t token = Acquire("order-1", "worker-a");
  clock_.AdvanceMs(kLeaseMs - 1);
  EXPECT_EQ(Do(Query("order-1")).outcome, Outcome::kFound);
  clock_.AdvanceMs(1);

  const OpResult q = Do(Query("order-1"));
  EXPECT_EQ(q.outcome, Outcome::kAbsent);
  EXPECT_EQ(q.record.state, State::kAbsent);
  EXPECT_EQ(q.record.token, token);  // History of the lapsed lease.
}

TEST_F(StoreTest, QueryOfUnknownKeyReadsAbsent) {
  const OpResult q = Do(Query("never"));
  EXPECT_EQ(q.outcome, Outcome::kAbsent);
  EXPECT_EQ(q.record.ns, kNs);
  EXPECT_EQ(q.record.key, "never");
}

TEST_F(StoreTest, SameKeyInDifferentNamespacesIsIndependent) {
  EXPECT_EQ(Do(Claim("order-1", "worker-a", "", "coupon-deduct")).outcome, Outcome::kAcquired);
  EXPECT_EQ(Do(Claim("order-1", "worker-b", "", "payment-callback")).outcome, Outcome::kAcquired);
  EXPECT_EQ(Do(Query("order-1", "payment-callback")).record.owner, "worker-b");
  EXPECT_EQ(Do(Query("order-1", "coupon-deduct")).record.owner, "worker-a");
}

}  // namespace
}  // namespace dedup::storage
