// Claim: the atomic insert-if-absent with a lease (design.md §3, §4).

#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "orders";

using ClaimTest = ServerTest;

TEST_F(ClaimTest, FirstClaimIsAcquiredWithTokenAndDefaultLease) {
  const v1::ClaimResponse claim = Claim(ClaimOf(kNs, "order-1", "worker-a"));

  EXPECT_EQ(claim.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_GT(claim.token(), 0u);
  EXPECT_EQ(claim.lease_expires_ms(), kStartMs + kDefaultLeaseMs);
  EXPECT_EQ(claim.attempts(), 1u);
  EXPECT_FALSE(claim.takeover());
}

TEST_F(ClaimTest, LeaseAskedForRunsFromNow) {
  clock_.AdvanceMs(1234);

  const v1::ClaimResponse claim = Claim(ClaimOf(kNs, "order-1", "worker-a", 5000));

  EXPECT_EQ(claim.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(claim.lease_expires_ms(), kStartMs + 1234 + 5000);
}

TEST_F(ClaimTest, SameOwnerClaimingAgainGetsTheSameToken) {
  const v1::ClaimResponse first = Claim(ClaimOf(kNs, "order-1", "worker-a"));
  clock_.AdvanceMs(1000);

  const v1::ClaimResponse retry = Claim(ClaimOf(kNs, "order-1", "worker-a"));

  EXPECT_EQ(retry.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(retry.token(), first.token());
  EXPECT_EQ(retry.lease_expires_ms(), first.lease_expires_ms());
  EXPECT_EQ(retry.attempts(), 1u) << "a re-entrant claim is not a new attempt";
  EXPECT_FALSE(retry.takeover());
}

TEST_F(ClaimTest, AnotherOwnerSeesInProgressWithHolderAndItsLease) {
  const v1::ClaimResponse held = Claim(ClaimOf(kNs, "order-1", "worker-a", 20'000));

  const v1::ClaimResponse duplicate = Claim(ClaimOf(kNs, "order-1", "worker-b"));

  EXPECT_EQ(duplicate.outcome(), v1::ClaimResponse::IN_PROGRESS);
  EXPECT_EQ(duplicate.holder(), "worker-a");
  EXPECT_EQ(duplicate.lease_expires_ms(), kStartMs + 20'000);
  EXPECT_GT(held.token(), 0u);
  EXPECT_EQ(duplicate.token(), 0u) << "the holder's token is a capability, not shown to others";
}

TEST_F(ClaimTest, LeaseProtectsTheKeyUntilItsLastMillisecond) {
  Claim(ClaimOf(kNs, "order-1", "worker-a", 1000));
  clock_.AdvanceMs(999);

  EXPECT_EQ(Claim(ClaimOf(kNs, "order-1", "worker-b")).outcome(), v1::ClaimResponse::IN_PROGRESS);
}

TEST_F(ClaimTest, ExpiredLeaseIsTakenOverWithALargerToken) {
  const v1::ClaimResponse first = Claim(ClaimOf(kNs, "order-1", "worker-a", 1000));
  clock_.AdvanceMs(1000);

  const v1::ClaimResponse takeover = Claim(ClaimOf(kNs, "order-1", "worker-b"));

  EXPECT_EQ(takeover.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_GT(takeover.token(), first.token());
  EXPECT_TRUE(takeover.takeover());
  EXPECT_EQ(takeover.attempts(), 2u);
  EXPECT_EQ(takeover.lease_expires_ms(), kStartMs + 1000 + kDefaultLeaseMs);
  EXPECT_EQ(Claim(ClaimOf(kNs, "order-1", "worker-a")).holder(), "worker-b");
}

TEST_F(ClaimTest, DifferentKeysAreIndependent) {
  Claim(ClaimOf(kNs, "order-1", "worker-a"));

  EXPECT_EQ(Claim(ClaimOf(kNs, "order-2", "worker-b")).outcome(), v1::ClaimResponse::ACQUIRED);
}

TEST_F(ClaimTest, SameKeyInAnotherNamespaceIsIndependent) {
  Claim(ClaimOf(kNs, "order-1", "worker-a"));

  EXPECT_EQ(Claim(ClaimOf("refunds", "order-1", "worker-b")).outcome(),
            v1::ClaimResponse::ACQUIRED);
}

TEST_F(ClaimTest, DifferentFingerprintForAHeldKeyIsMismatch) {
  v1::ClaimRequest first = ClaimOf(kNs, "order-1", "worker-a");
  first.set_fingerprint("sha256:aaaa");
  Claim(first);

  v1::ClaimRequest other_payload = ClaimOf(kNs, "order-1", "worker-b");
  other_payload.set_fingerprint("sha256:bbbb");
  EXPECT_EQ(Claim(other_payload).outcome(), v1::ClaimResponse::MISMATCH);
}

TEST_F(ClaimTest, DifferentFingerprintForACompletedKeyIsMismatchNotAReplay) {
  v1::ClaimRequest first = ClaimOf(kNs, "order-1", "worker-a");
  first.set_fingerprint("sha256:aaaa");
  const uint64_t token = Claim(first).token();
  Complete(CompleteOf(kNs, "order-1", token, "charged"));

  v1::ClaimRequest other_payload = ClaimOf(kNs, "order-1", "worker-b");
  other_payload.set_fingerprint("sha256:bbbb");
  const v1::ClaimResponse answer = Claim(other_payload);

  EXPECT_EQ(answer.outcome(), v1::ClaimResponse::MISMATCH);
  EXPECT_EQ(answer.result(), "") << "a mismatch must not replay the stored result";
}

TEST_F(ClaimTest, SameFingerprintIsAnOrdinaryDuplicate) {
  v1::ClaimRequest first = ClaimOf(kNs, "order-1", "worker-a");
  first.set_fingerprint("sha256:aaaa");
  Claim(first);

  v1::ClaimRequest same_payload = ClaimOf(kNs, "order-1", "worker-b");
  same_payload.set_fingerprint("sha256:aaaa");
  EXPECT_EQ(Claim(same_payload).outcome(), v1::ClaimResponse::IN_PROGRESS);
}

}  // namespace
}  // namespace dedup::server::test
