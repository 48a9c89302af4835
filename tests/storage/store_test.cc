#include "storage/store.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "storage/clock.h"
#include "storage/key_codec.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "tests/common/temp_dir.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// The Store end to end (store_fixture.h). Each test pins one behaviour of
// DESIGN §3-§5.
namespace dedup::storage {
namespace {

// Records dropped by the TTL filter since the store opened, of any kind.
uint64_t TotalDrops(const Store& store) {
  const CompactionDrops& drops = store.compaction_drops();
  return drops.completed.load() + drops.failed.load() + drops.abandoned.load();
}

// --- Claim ---

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

// --- Complete ---

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

// --- Release and poisoning ---

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

// --- Fingerprints ---

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

// --- Expiry and absence ---

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

// --- Batches ---

TEST_F(StoreTest, BatchAnswersEachOperationInOrder) {
  const uint64_t held = Acquire("held", "worker-z");
  const std::vector<Operation> ops = {
      Claim("a", "worker-a"), Query("nothing"),       Claim("held", "worker-b"),
      Complete("nothing", 1), Claim("b", "worker-b"), Release("held", held + 1000),
  };
  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);

  ASSERT_EQ(results.size(), ops.size());
  const std::vector<Outcome> expected = {
      Outcome::kAcquired, Outcome::kAbsent,   Outcome::kInProgress,
      Outcome::kNotFound, Outcome::kAcquired, Outcome::kStaleToken,
  };
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->outcome, expected[i]) << "position " << i;
  }
  EXPECT_EQ(results[0]->record.key, "a");
  EXPECT_EQ(results[4]->record.key, "b");
  EXPECT_EQ(results[2]->record.owner, "worker-z");
}

TEST_F(StoreTest, BatchOperationsOnSameKeySeeEarlierOnes) {
  const std::vector<Operation> ops = {
      Claim("order-1", "worker-a"),
      Claim("order-1", "worker-a"),  // Re-entrant: the claim above is visible.
      Claim("order-1", "worker-b"),
  };
  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(results[0]->outcome, Outcome::kAcquired);
  EXPECT_EQ(results[1]->outcome, Outcome::kAcquired);
  EXPECT_EQ(results[1]->record.token, results[0]->record.token);
  EXPECT_EQ(results[2]->outcome, Outcome::kInProgress);
  EXPECT_EQ(results[2]->record.owner, "worker-a");
}

TEST_F(StoreTest, ClaimThenCompleteInOneBatchAcquiresThenCompletes) {
  // The claim's token is not known before the batch runs, but tokens come
  // from a per-shard counter: a probe in the same shard tells the next one.
  const uint32_t shard = ShardOf(kNs, "probe", store_->shard_count());
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    const std::string candidate = "order-" + std::to_string(i);
    if (ShardOf(kNs, candidate, store_->shard_count()) == shard) key = candidate;
  }
  const uint64_t next = Acquire("probe", "worker-p") + 1;

  const std::vector<Operation> ops = {
      Claim(key, "worker-a"),
      Complete(key, next, "receipt"),
      Claim(key, "worker-b"),
  };
  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(results[0]->outcome, Outcome::kAcquired);
  ASSERT_EQ(results[0]->record.token, next);
  EXPECT_EQ(results[1]->outcome, Outcome::kOk);
  EXPECT_EQ(results[2]->outcome, Outcome::kCompleted);
  EXPECT_EQ(results[2]->record.result, "receipt");

  // And the batch's final state is what was persisted.
  Close();
  ASSERT_NO_FATAL_FAILURE(Open(Options()));
  const OpResult q = Do(Query(key));
  EXPECT_EQ(q.record.state, State::kCompleted);
  EXPECT_EQ(q.record.result, "receipt");
}

TEST_F(StoreTest, EmptyBatchAnswersNothing) {
  EXPECT_TRUE(store_->Apply(absl::Span<const Operation>()).empty());
}

// --- Compaction ---

TEST_F(StoreTest, CompactionDropsExpiredCompletedKeepsLive) {
  const uint64_t old_token = Acquire("old", "worker-a");
  ASSERT_EQ(Do(Complete("old", old_token, "old receipt")).outcome, Outcome::kOk);
  const uint64_t fresh_token = Acquire("fresh", "worker-a");
  ASSERT_EQ(Do(Complete("fresh", fresh_token, "fresh receipt", kDayMs)).outcome, Outcome::kOk);
  ClaimOp long_claim = Claim("working", "worker-a");
  long_claim.lease_ms = kDayMs;
  ASSERT_EQ(Do(long_claim).outcome, Outcome::kAcquired);

  clock_.AdvanceMs(kRetentionMs);
  // Expired, so invisible, but still on disk until compaction.
  const OpResult before = Do(Query("old"));
  EXPECT_EQ(before.outcome, Outcome::kAbsent);
  EXPECT_EQ(before.record.token, old_token);

  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(store_->compaction_drops().completed.load(), 1u);
  EXPECT_EQ(store_->compaction_drops().failed.load(), 0u);
  EXPECT_EQ(store_->compaction_drops().abandoned.load(), 0u);

  // Physically gone: no history left, even to a reader back at a time when
  // it was live.
  const OpResult after = Do(Query("old"));
  EXPECT_EQ(after.outcome, Outcome::kAbsent);
  EXPECT_EQ(after.record.token, 0u);
  clock_.SetMs(kStartMs);
  EXPECT_EQ(Do(Query("old")).outcome, Outcome::kAbsent);
  EXPECT_EQ(ScanKeys(State::kCompleted), std::vector<std::string>{"fresh"});
  clock_.SetMs(kStartMs + kRetentionMs);

  const OpResult fresh = Do(Query("fresh"));
  EXPECT_EQ(fresh.record.state, State::kCompleted);
  EXPECT_EQ(fresh.record.result, "fresh receipt");
  EXPECT_EQ(Do(Query("working")).record.state, State::kInProgress);
  EXPECT_EQ(ScanKeys(State::kAbsent), (std::vector<std::string>{"fresh", "working"}));
}

TEST_F(StoreTest, CompactionDropsAbandonedLeaseOnlyAfterGrace) {
  const uint64_t token = Acquire("abandoned", "worker-a");

  clock_.AdvanceMs(kLeaseMs + kGraceMs - 1);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(TotalDrops(*store_), 0u);
  // Within the grace the lapsed lease keeps its history.
  EXPECT_EQ(Do(Query("abandoned")).record.token, token);

  clock_.AdvanceMs(1);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(store_->compaction_drops().abandoned.load(), 1u);
  EXPECT_EQ(TotalDrops(*store_), 1u);
  EXPECT_EQ(Do(Query("abandoned")).record.token, 0u);

  // With the record gone the next claim is a fresh first attempt, yet its
  // token still goes up.
  const OpResult r = Do(Claim("abandoned", "worker-b"));
  EXPECT_EQ(r.outcome, Outcome::kAcquired);
  EXPECT_FALSE(r.takeover);
  EXPECT_EQ(r.record.attempts, 1u);
  EXPECT_GT(r.record.token, token);
}

TEST_F(StoreTest, CompactionDropsReleasedAfterGraceAndFailedAfterRetention) {
  const uint64_t released = Acquire("released", "worker-a");
  ASSERT_EQ(Do(Release("released", released)).outcome, Outcome::kOk);
  const uint64_t poisoned = Acquire("poisoned", "worker-a");
  ASSERT_EQ(Do(Release("poisoned", poisoned, /*max_attempts=*/1)).outcome, Outcome::kFailed);

  clock_.AdvanceMs(kGraceMs);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(store_->compaction_drops().abandoned.load(), 1u);
  EXPECT_EQ(store_->compaction_drops().failed.load(), 0u);
  EXPECT_EQ(Do(Query("released")).outcome, Outcome::kAbsent);
  EXPECT_EQ(Do(Query("poisoned")).record.state, State::kFailed);

  clock_.SetMs(kStartMs + kFailedRetentionMs);
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(store_->compaction_drops().abandoned.load(), 1u);
  EXPECT_EQ(store_->compaction_drops().failed.load(), 1u);
  EXPECT_EQ(store_->compaction_drops().completed.load(), 0u);
  EXPECT_EQ(Do(Query("poisoned")).record.token, 0u);
  EXPECT_EQ(ScanKeys(State::kAbsent), std::vector<std::string>{});
}

TEST_F(StoreTest, CompactionKeepsEveryLiveRecord) {
  std::set<std::string> keys;
  for (int i = 0; i < 50; ++i) {
    const std::string key = "order-" + std::to_string(i);
    keys.insert(key);
    const uint64_t token = Acquire(key, "worker-a");
    if (i % 2 == 0) {
      ASSERT_EQ(Do(Complete(key, token, "r-" + key)).outcome, Outcome::kOk);
    }
  }
  ASSERT_TRUE(store_->Flush().ok());
  ASSERT_TRUE(store_->CompactAll().ok());

  EXPECT_EQ(TotalDrops(*store_), 0u);
  for (int i = 0; i < 50; ++i) {
    const std::string key = "order-" + std::to_string(i);
    const OpResult q = Do(Query(key));
    EXPECT_EQ(q.outcome, Outcome::kFound) << key;
    if (i % 2 == 0) {
      EXPECT_EQ(q.record.result, "r-" + key);
    }
  }
  EXPECT_EQ(ScanKeys(State::kAbsent).size(), keys.size());
}

// --- Fencing tokens across restarts ---

TEST_F(StoreTest, TokensStayMonotonicAfterReopen) {
  StoreOptions options = Options();
  options.token_block = 3;  // Reopen lands inside and across blocks.
  uint64_t last = 0;
  for (int open = 0; open < 6; ++open) {
    ASSERT_NO_FATAL_FAILURE(Open(options));
    for (int i = 0; i < 5; ++i) {
      const std::string owner = "worker-" + std::to_string(open) + "-" + std::to_string(i);
      ClaimOp claim = Claim("order-1", owner);
      claim.max_attempts = 1000;
      const OpResult r = Do(claim);
      ASSERT_EQ(r.outcome, Outcome::kAcquired) << owner;
      EXPECT_GT(r.record.token, last) << owner;
      last = r.record.token;
      ASSERT_EQ(Do(Release("order-1", last, /*max_attempts=*/1000)).outcome, Outcome::kOk);
    }
    Close();
  }
}

TEST_F(StoreTest, TokensStayMonotonicAfterCompactionDropsRecordAndReopen) {
  StoreOptions options = Options();
  options.token_block = 3;
  ASSERT_NO_FATAL_FAILURE(Open(options));
  uint64_t last = 0;
  for (int round = 0; round < 4; ++round) {
    const OpResult r = Do(Claim("order-1", "worker-" + std::to_string(round)));
    ASSERT_EQ(r.outcome, Outcome::kAcquired) << round;
    EXPECT_GT(r.record.token, last) << round;
    last = r.record.token;
    ASSERT_EQ(Do(Complete("order-1", last)).outcome, Outcome::kOk);

    clock_.AdvanceMs(kRetentionMs);
    const uint64_t dropped_before = store_->compaction_drops().completed.load();
    ASSERT_TRUE(store_->CompactAll().ok());
    EXPECT_EQ(store_->compaction_drops().completed.load(), dropped_before + 1) << round;
    ASSERT_EQ(Do(Query("order-1")).record.token, 0u) << "record not dropped";
    if (round % 2 == 1) {
      ASSERT_NO_FATAL_FAILURE(Open(options));
    }
  }
}

// --- Opening a data directory ---

TEST_F(StoreTest, ReopenWithDifferentShardCountIsRefused) {
  const uint64_t token = Acquire("order-1", "worker-a");
  Close();

  for (uint32_t shards : {kShards * 2, kShards - 1, 1u}) {
    StoreOptions options = Options();
    options.shards = shards;
    absl::StatusOr<std::unique_ptr<Store>> refused = Store::Open(options);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
        << shards << " shards: " << refused.status();
  }

  // The refusal left the directory intact and unlocked.
  ASSERT_NO_FATAL_FAILURE(Open(Options()));
  EXPECT_EQ(store_->shard_count(), kShards);
  EXPECT_EQ(Do(Query("order-1")).record.token, token);
}

TEST_F(StoreTest, ReopenWithZeroShardsKeepsExistingCount) {
  const uint64_t token = Acquire("order-1", "worker-a");
  StoreOptions options = Options();
  options.shards = 0;
  ASSERT_NO_FATAL_FAILURE(Open(options));

  EXPECT_EQ(store_->shard_count(), kShards);
  EXPECT_EQ(Do(Query("order-1")).record.token, token);
}

TEST_F(StoreTest, SecondOpenWhileOpenFailsAsInUse) {
  absl::StatusOr<std::unique_ptr<Store>> second = Store::Open(Options());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(second.status().message(), "in use")) << second.status();

  // The first store is unaffected, and the directory opens once it closes.
  const uint64_t token = Acquire("order-1", "worker-a");
  ASSERT_NO_FATAL_FAILURE(Open(Options()));
  EXPECT_EQ(Do(Query("order-1")).record.token, token);
}

TEST(StoreOpenTest, NewDirectoryWithZeroShardsGetsDefaultCount) {
  test::TempDir dir;
  ManualClock clock(kStartMs);
  StoreOptions options;
  options.path = dir.Sub("data");
  options.clock = &clock;
  for (int open = 0; open < 2; ++open) {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->shard_count(), kDefaultShards);
  }
}

TEST(StoreOpenTest, RefusesBadOptionsAsInvalidArgument) {
  test::TempDir dir;
  ManualClock clock(kStartMs);
  StoreOptions good;
  good.path = dir.Sub("data");
  good.clock = &clock;

  StoreOptions no_path = good;
  no_path.path = "";
  StoreOptions too_many_shards = good;
  too_many_shards.shards = kMaxShards + 1;
  StoreOptions no_clock = good;
  no_clock.clock = nullptr;
  for (const StoreOptions& options : {no_path, too_many_shards, no_clock}) {
    EXPECT_EQ(Store::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// --- Scan ---

TEST_F(StoreTest, ScanFiltersByState) {
  Acquire("in-progress", "worker-a");
  ASSERT_EQ(Do(Complete("completed", Acquire("completed", "worker-a"))).outcome, Outcome::kOk);
  ASSERT_EQ(Do(Release("released", Acquire("released", "worker-a"))).outcome, Outcome::kOk);
  ASSERT_EQ(Do(Release("failed", Acquire("failed", "worker-a"), 1)).outcome, Outcome::kFailed);
  ClaimOp short_claim = Claim("lapsed", "worker-a");
  short_claim.lease_ms = 1'000;
  ASSERT_EQ(Do(short_claim).outcome, Outcome::kAcquired);
  clock_.AdvanceMs(1'000);  // "lapsed" now reads ABSENT.

  using Keys = std::vector<std::string>;
  EXPECT_EQ(ScanKeys(State::kInProgress), Keys{"in-progress"});
  EXPECT_EQ(ScanKeys(State::kCompleted), Keys{"completed"});
  EXPECT_EQ(ScanKeys(State::kReleased), Keys{"released"});
  EXPECT_EQ(ScanKeys(State::kFailed), Keys{"failed"});
  EXPECT_EQ(ScanKeys(State::kAbsent), (Keys{"completed", "failed", "in-progress", "released"}));

  // Records carry their namespace, key and effective state.
  const std::map<std::string, State> expected = {
      {"in-progress", State::kInProgress},
      {"completed", State::kCompleted},
      {"released", State::kReleased},
      {"failed", State::kFailed},
  };
  ScanQuery query;
  query.ns = kNs;
  for (const Record& r : ScanAll(query)) {
    EXPECT_EQ(r.ns, kNs);
    ASSERT_EQ(expected.count(r.key), 1u) << r.key;
    EXPECT_EQ(r.state, expected.at(r.key)) << r.key;
  }
}

TEST_F(StoreTest, ScanFiltersByMinAge) {
  constexpr int64_t kTenMinutesMs = 10 * 60 * 1000;
  ClaimOp old_claim = Claim("old", "worker-a");
  old_claim.lease_ms = kDayMs;
  ASSERT_EQ(Do(old_claim).outcome, Outcome::kAcquired);
  clock_.AdvanceMs(kTenMinutesMs);
  Acquire("new", "worker-a");

  using Keys = std::vector<std::string>;
  EXPECT_EQ(ScanKeys(State::kInProgress, 0), (Keys{"new", "old"}));
  EXPECT_EQ(ScanKeys(State::kInProgress, kTenMinutesMs), Keys{"old"});
  EXPECT_EQ(ScanKeys(State::kInProgress, kTenMinutesMs + 1), Keys{});
}

TEST_F(StoreTest, ScanPagesWithCursorAcrossShards) {
  std::vector<std::string> keys;
  std::set<uint32_t> shards;
  for (int i = 0; i < 40; ++i) {
    keys.push_back("order-" + std::to_string(i));
    shards.insert(ShardOf(kNs, keys.back(), kShards));
    Acquire(keys.back(), "worker-a");
  }
  ASSERT_GT(shards.size(), 1u) << "the keys must span shards for this test";
  std::sort(keys.begin(), keys.end());

  ScanQuery query;
  query.ns = kNs;
  std::vector<Record> seen;
  ScanCursor cursor;
  int pages = 0;
  while (!cursor.done && pages < 100) {
    absl::StatusOr<ScanPage> page = store_->Scan(query, cursor, 7);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->records.size(), 7u);
    seen.insert(seen.end(), page->records.begin(), page->records.end());
    cursor = page->next;
    ++pages;
  }
  EXPECT_TRUE(cursor.done);
  EXPECT_GE(pages, 6);            // 40 records, 7 a page.
  EXPECT_EQ(KeysOf(seen), keys);  // Every record exactly once.

  // A finished cursor stays finished.
  absl::StatusOr<ScanPage> after_end = store_->Scan(query, cursor, 7);
  ASSERT_TRUE(after_end.ok());
  EXPECT_TRUE(after_end->records.empty());
  EXPECT_TRUE(after_end->next.done);
}

TEST_F(StoreTest, ScanReturnsOnlyTheNamespaceAsked) {
  for (const char* ns : {"a", "ab", "a-b", "b", ""}) {
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(Do(Claim(std::string(ns) + "/" + std::to_string(i), "worker-a", "", ns)).outcome,
                Outcome::kAcquired);
    }
  }
  for (const char* ns : {"a", "ab", "b"}) {
    ScanQuery query;
    query.ns = ns;
    const std::vector<Record> records = ScanAll(query, 2);
    EXPECT_EQ(records.size(), 5u) << ns;
    for (const Record& r : records) {
      EXPECT_EQ(r.ns, ns);
      EXPECT_TRUE(absl::StartsWith(r.key, std::string(ns) + "/")) << r.key;
    }
  }
  ScanQuery unknown;
  unknown.ns = "c";
  EXPECT_TRUE(ScanAll(unknown).empty());
}

// --- Durability ---

class StoreDurabilityTest : public StoreTest, public ::testing::WithParamInterface<Durability> {};

TEST_P(StoreDurabilityTest, WrittenRecordsAreReadableAfterCleanReopen) {
  StoreOptions options = Options();
  options.durability = GetParam();
  options.buffered_sync_interval_ms = 10;
  ASSERT_NO_FATAL_FAILURE(Open(options));
  std::map<std::string, uint64_t> tokens;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "order-" + std::to_string(i);
    tokens[key] = Acquire(key, "worker-a");
    if (i % 2 == 0) {
      ASSERT_EQ(Do(Complete(key, tokens[key], "receipt-" + key)).outcome, Outcome::kOk);
    }
  }
  EXPECT_TRUE(store_->BackgroundError().ok()) << store_->BackgroundError();
  Close();

  ASSERT_NO_FATAL_FAILURE(Open(options));
  for (int i = 0; i < 20; ++i) {
    const std::string key = "order-" + std::to_string(i);
    const OpResult q = Do(Query(key));
    EXPECT_EQ(q.outcome, Outcome::kFound) << key;
    EXPECT_EQ(q.record.token, tokens[key]) << key;
    if (i % 2 == 0) {
      EXPECT_EQ(q.record.state, State::kCompleted) << key;
      EXPECT_EQ(q.record.result, "receipt-" + key);
    } else {
      EXPECT_EQ(q.record.state, State::kInProgress) << key;
    }
  }
}

TEST_P(StoreDurabilityTest, FlushSucceedsAndKeepsRecordsReadable) {
  StoreOptions options = Options();
  options.durability = GetParam();
  ASSERT_NO_FATAL_FAILURE(Open(options));
  const uint64_t token = Acquire("order-1", "worker-a");
  EXPECT_TRUE(store_->Flush().ok());
  EXPECT_TRUE(store_->BackgroundError().ok());
  EXPECT_EQ(Do(Query("order-1")).record.token, token);
}

INSTANTIATE_TEST_SUITE_P(Modes, StoreDurabilityTest,
                         ::testing::Values(Durability::kFsync, Durability::kBuffered),
                         [](const ::testing::TestParamInfo<Durability>& info) {
                           return info.param == Durability::kFsync ? "Fsync" : "Buffered";
                         });

// --- Concurrency ---

TEST_F(StoreTest, ConcurrentClaimsAcquireEachKeyExactlyOnce) {
  constexpr int kThreads = 8;
  constexpr int kKeys = 500;
  struct Answer {
    bool ok = false;
    Outcome outcome = Outcome::kAbsent;
    std::string owner;
    uint64_t token = 0;
  };
  // answers[thread][key]
  std::vector<std::vector<Answer>> answers(kThreads, std::vector<Answer>(kKeys));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, &answers] {
      const std::string owner = "worker-" + std::to_string(t);
      for (int i = 0; i < kKeys; ++i) {
        const int k = (i + t * 61) % kKeys;  // Each thread in its own order.
        absl::StatusOr<OpResult> r = store_->Apply(Claim("order-" + std::to_string(k), owner));
        Answer& answer = answers[t][k];
        answer.ok = r.ok();
        if (!r.ok()) continue;
        answer.outcome = r->outcome;
        answer.owner = r->record.owner;
        answer.token = r->record.token;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  for (int k = 0; k < kKeys; ++k) {
    int acquired = 0;
    std::string winner;
    uint64_t winning_token = 0;
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_TRUE(answers[t][k].ok) << "thread " << t << " key " << k;
      if (answers[t][k].outcome == Outcome::kAcquired) {
        ++acquired;
        winner = answers[t][k].owner;
        winning_token = answers[t][k].token;
      }
    }
    ASSERT_EQ(acquired, 1) << "key order-" << k;
    for (int t = 0; t < kThreads; ++t) {
      if (answers[t][k].outcome == Outcome::kAcquired) continue;
      EXPECT_EQ(answers[t][k].outcome, Outcome::kInProgress);
      EXPECT_EQ(answers[t][k].owner, winner);
      EXPECT_EQ(answers[t][k].token, winning_token);
    }
    EXPECT_EQ(Do(Query("order-" + std::to_string(k))).record.owner, winner);
  }
}

TEST_F(StoreTest, ConcurrentOverlappingBatchesNeitherDeadlockNorDoubleAcquire) {
  constexpr int kThreads = 4;
  constexpr int kKeys = 64;
  std::vector<std::map<int, int>> acquired(kThreads);  // key -> count
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, &acquired, &failures] {
      const std::string owner = "worker-" + std::to_string(t);
      for (int round = 0; round < 16; ++round) {
        // Overlapping key sets in different orders, with repeats.
        std::vector<Operation> ops;
        std::vector<int> keys;
        for (int j = 0; j < 12; ++j) {
          const int k = (t % 2 == 0) ? (round * 5 + j * 7) % kKeys
                                     : (kKeys - 1 - (round * 5 + j * 3) % kKeys);
          keys.push_back(k);
          ops.push_back(Claim("order-" + std::to_string(k), "x" + owner));
        }
        const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);
        for (size_t j = 0; j < results.size(); ++j) {
          if (!results[j].ok()) {
            ++failures[t];
          } else if (results[j]->outcome == Outcome::kAcquired &&
                     results[j]->record.owner == "x" + owner) {
            acquired[t][keys[j]] = 1;  // Repeats are re-entrant, count once.
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::map<int, int> winners;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    for (const auto& [key, count] : acquired[t]) winners[key] += count;
  }
  for (const auto& [key, count] : winners) {
    EXPECT_EQ(count, 1) << "key order-" << key << " acquired by several owners";
  }
  EXPECT_FALSE(winners.empty());
}

}  // namespace
}  // namespace dedup::storage
