#include "storage/lifecycle.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/printers.h"

// The transitions of design.md §3 as a pure function: no database, no clock,
// just a record, an operation and "now".
namespace dedup::storage {
namespace {

constexpr char kKey[] = "order-42";
constexpr int64_t kNow = 1'700'000'000'000;

// A token source that counts its calls and can be told to fail.
class FakeTokens {
 public:
  explicit FakeTokens(uint64_t next = 100) : next_(next) {}

  absl::StatusOr<uint64_t> Next() {
    ++calls_;
    if (fail_) return absl::UnavailableError("ceiling not persisted");
    return next_++;
  }

  void FailFromNowOn() { fail_ = true; }
  int calls() const { return calls_; }

 private:
  uint64_t next_;
  int calls_ = 0;
  bool fail_ = false;
};

// The record of a claim by `owner` with `token`, made at kNow - 1000.
Record InProgress(const std::string& owner, uint64_t token, uint32_t attempts = 1) {
  Record r;
  r.ns = kNs;
  r.key = kKey;
  r.state = State::kInProgress;
  r.owner = owner;
  r.token = token;
  r.lease_expires_ms = kNow - 1000 + kLeaseMs;
  r.attempts = attempts;
  r.created_ms = kNow - 1000;
  r.updated_ms = kNow - 1000;
  return r;
}

Record Completed(uint64_t token, const std::string& result) {
  Record r = InProgress("worker-a", token);
  r.state = State::kCompleted;
  r.lease_expires_ms = 0;
  r.retention_expires_ms = kNow + kRetentionMs;
  r.completed_ms = kNow - 500;
  r.updated_ms = kNow - 500;
  r.result = result;
  return r;
}

Record Released(uint64_t token, uint32_t attempts = 1) {
  Record r = InProgress("worker-a", token, attempts);
  r.state = State::kReleased;
  r.lease_expires_ms = kNow - 500;
  r.updated_ms = kNow - 500;
  return r;
}

Record Failed(uint64_t token) {
  Record r = InProgress("worker-a", token, kMaxAttempts);
  r.state = State::kFailed;
  r.lease_expires_ms = 0;
  r.retention_expires_ms = kNow + kFailedRetentionMs;
  return r;
}

Transition Decided(const Operation& op, const std::optional<Record>& current, int64_t now_ms,
                   FakeTokens& tokens) {
  absl::StatusOr<Transition> t = Decide(op, current, now_ms, [&tokens] { return tokens.Next(); });
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : Transition{};
}

// --- Claim ---

TEST(LifecycleTest, ClaimOfUnknownKeyAcquiresAndStoresFreshRecord) {
  FakeTokens tokens(100);
  const Transition t = Decided(Claim(kKey, "worker-a", "sha-1"), std::nullopt, kNow, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kAcquired);
  EXPECT_FALSE(t.result.takeover);
  ASSERT_TRUE(t.write);
  EXPECT_EQ(tokens.calls(), 1);
  const Record& r = t.stored;
  EXPECT_EQ(r.ns, kNs);
  EXPECT_EQ(r.key, kKey);
  EXPECT_EQ(r.state, State::kInProgress);
  EXPECT_EQ(r.owner, "worker-a");
  EXPECT_EQ(r.token, 100u);
  EXPECT_EQ(r.fingerprint, "sha-1");
  EXPECT_EQ(r.lease_expires_ms, kNow + kLeaseMs);
  EXPECT_EQ(r.attempts, 1u);
  EXPECT_EQ(r.created_ms, kNow);
  EXPECT_EQ(r.updated_ms, kNow);
  EXPECT_EQ(t.result.record, t.stored);
}

TEST(LifecycleTest, ReentrantClaimByLeaseHolderReturnsSameTokenWithoutWriting) {
  FakeTokens tokens;
  const Record held = InProgress("worker-a", 7);
  const Transition t = Decided(Claim(kKey, "worker-a"), held, kNow, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kAcquired);
  EXPECT_EQ(t.result.record.token, 7u);
  EXPECT_EQ(t.result.record.lease_expires_ms, held.lease_expires_ms);
  EXPECT_FALSE(t.write);
  EXPECT_EQ(tokens.calls(), 0);
}

TEST(LifecycleTest, ClaimOfLiveLeaseByOtherOwnerReportsHolderWithoutDrawingToken) {
  FakeTokens tokens;
  const Record held = InProgress("worker-a", 7);
  const Transition t = Decided(Claim(kKey, "worker-b"), held, kNow, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kInProgress);
  EXPECT_EQ(t.result.record.owner, "worker-a");
  EXPECT_EQ(t.result.record.lease_expires_ms, held.lease_expires_ms);
  EXPECT_FALSE(t.write);
  EXPECT_EQ(tokens.calls(), 0);
}

TEST(LifecycleTest, LeaseEndsExactlyAtItsExpiryInstant) {
  FakeTokens tokens;
  const Record held = InProgress("worker-a", 7);
  EXPECT_EQ(
      Decided(Claim(kKey, "worker-b"), held, held.lease_expires_ms - 1, tokens).result.outcome,
      Outcome::kInProgress);
  EXPECT_EQ(Decided(Claim(kKey, "worker-b"), held, held.lease_expires_ms, tokens).result.outcome,
            Outcome::kAcquired);
}

TEST(LifecycleTest, ClaimOverLapsedLeaseTakesOverAsNewAttempt) {
  FakeTokens tokens(50);
  const Record held = InProgress("worker-a", 7);
  const int64_t later = held.lease_expires_ms + 5;
  const Transition t = Decided(Claim(kKey, "worker-b"), held, later, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kAcquired);
  EXPECT_TRUE(t.result.takeover);
  ASSERT_TRUE(t.write);
  EXPECT_EQ(t.stored.owner, "worker-b");
  EXPECT_EQ(t.stored.token, 50u);
  EXPECT_EQ(t.stored.attempts, 2u);
  EXPECT_EQ(t.stored.lease_expires_ms, later + kLeaseMs);
  EXPECT_EQ(t.stored.created_ms, held.created_ms);
  EXPECT_EQ(t.stored.updated_ms, later);
}

TEST(LifecycleTest, SameOwnerClaimAfterOwnLeaseLapsedGetsNewToken) {
  FakeTokens tokens(50);
  const Record held = InProgress("worker-a", 7);
  const Transition t = Decided(Claim(kKey, "worker-a"), held, held.lease_expires_ms, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kAcquired);
  EXPECT_TRUE(t.result.takeover);
  EXPECT_EQ(t.stored.token, 50u);
}

TEST(LifecycleTest, ClaimOverLapsedLeaseAtMaxAttemptsPoisonsWithoutDrawingToken) {
  FakeTokens tokens;
  const Record held = InProgress("worker-a", 7, kMaxAttempts);
  const int64_t later = held.lease_expires_ms + 1;
  const Transition t = Decided(Claim(kKey, "worker-b"), held, later, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kFailed);
  EXPECT_EQ(tokens.calls(), 0);
  ASSERT_TRUE(t.write);
  EXPECT_EQ(t.stored.state, State::kFailed);
  EXPECT_EQ(t.stored.token, 7u);
  EXPECT_EQ(t.stored.retention_expires_ms, later + kFailedRetentionMs);
  EXPECT_EQ(t.stored.updated_ms, later);
}

TEST(LifecycleTest, ClaimOfReleasedKeyAcquiresWithoutTakeover) {
  FakeTokens tokens(50);
  const Transition t = Decided(Claim(kKey, "worker-b"), Released(7), kNow, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kAcquired);
  EXPECT_FALSE(t.result.takeover);
  EXPECT_EQ(t.stored.state, State::kInProgress);
  EXPECT_EQ(t.stored.token, 50u);
  EXPECT_EQ(t.stored.attempts, 2u);
}

TEST(LifecycleTest, ClaimOfCompletedKeyReplaysStoredResult) {
  FakeTokens tokens;
  const Record done = Completed(7, "receipt-9");
  const Transition t = Decided(Claim(kKey, "worker-b"), done, kNow, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kCompleted);
  EXPECT_EQ(t.result.record.result, "receipt-9");
  EXPECT_EQ(t.result.record.completed_ms, done.completed_ms);
  EXPECT_FALSE(t.write);
  EXPECT_EQ(tokens.calls(), 0);
}

TEST(LifecycleTest, ClaimOfPoisonedKeyAnswersFailed) {
  FakeTokens tokens;
  const Transition t = Decided(Claim(kKey, "worker-b"), Failed(7), kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kFailed);
  EXPECT_FALSE(t.write);
  EXPECT_EQ(tokens.calls(), 0);
}

TEST(LifecycleTest, ClaimAfterRetentionEndedStartsFreshRecord) {
  FakeTokens tokens(50);
  Record done = Completed(7, "receipt-9");
  done.fingerprint = "sha-old";
  const int64_t later = done.retention_expires_ms;
  const Transition t = Decided(Claim(kKey, "worker-b", "sha-new"), done, later, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kAcquired);
  EXPECT_FALSE(t.result.takeover);
  ASSERT_TRUE(t.write);
  EXPECT_EQ(t.stored.token, 50u);
  EXPECT_EQ(t.stored.attempts, 1u);
  EXPECT_EQ(t.stored.created_ms, later);
  EXPECT_EQ(t.stored.fingerprint, "sha-new");
  EXPECT_EQ(t.stored.result, "");
  EXPECT_EQ(t.stored.completed_ms, 0);
}

TEST(LifecycleTest, FingerprintsMismatchOnlyWhenBothGivenAndDifferent) {
  FakeTokens tokens;
  Record held = InProgress("worker-a", 7);
  held.fingerprint = "sha-1";
  EXPECT_EQ(Decided(Claim(kKey, "worker-b", "sha-2"), held, kNow, tokens).result.outcome,
            Outcome::kMismatch);
  EXPECT_EQ(Decided(Claim(kKey, "worker-b", "sha-1"), held, kNow, tokens).result.outcome,
            Outcome::kInProgress);
  EXPECT_EQ(Decided(Claim(kKey, "worker-b", ""), held, kNow, tokens).result.outcome,
            Outcome::kInProgress);
  held.fingerprint = "";
  EXPECT_EQ(Decided(Claim(kKey, "worker-b", "sha-2"), held, kNow, tokens).result.outcome,
            Outcome::kInProgress);
  EXPECT_EQ(tokens.calls(), 0);
}

TEST(LifecycleTest, FingerprintOfLapsedLeaseStillGuardsTheKey) {
  FakeTokens tokens;
  Record held = InProgress("worker-a", 7);
  held.fingerprint = "sha-1";
  const Transition t =
      Decided(Claim(kKey, "worker-b", "sha-2"), held, held.lease_expires_ms + 1, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kMismatch);
  EXPECT_FALSE(t.write);
  EXPECT_EQ(tokens.calls(), 0);
}

TEST(LifecycleTest, ReacquiredRecordAdoptsFirstFingerprintGiven) {
  FakeTokens tokens;
  const Transition adopted = Decided(Claim(kKey, "worker-b", "sha-2"), Released(7), kNow, tokens);
  EXPECT_EQ(adopted.stored.fingerprint, "sha-2");

  Record with_fingerprint = Released(7);
  with_fingerprint.fingerprint = "sha-1";
  const Transition kept = Decided(Claim(kKey, "worker-b", ""), with_fingerprint, kNow, tokens);
  EXPECT_EQ(kept.result.outcome, Outcome::kAcquired);
  EXPECT_EQ(kept.stored.fingerprint, "sha-1");
}

TEST(LifecycleTest, FailingTokenSourceFailsTheWinningClaim) {
  FakeTokens tokens;
  tokens.FailFromNowOn();
  const absl::StatusOr<Transition> t =
      Decide(Claim(kKey, "worker-a"), std::nullopt, kNow, [&tokens] { return tokens.Next(); });
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnavailable);
}

TEST(LifecycleTest, FailingTokenSourceLeavesClaimsThatDoNotWinAlone) {
  FakeTokens tokens;
  tokens.FailFromNowOn();
  for (const Record& current : {InProgress("worker-a", 7), Completed(7, "r"), Failed(7)}) {
    const absl::StatusOr<Transition> t =
        Decide(Claim(kKey, "worker-b"), current, kNow, [&tokens] { return tokens.Next(); });
    EXPECT_TRUE(t.ok()) << StateName(current.state) << ": " << t.status();
  }
  EXPECT_EQ(tokens.calls(), 0);
}

// --- Complete ---

TEST(LifecycleTest, CompleteWithNewestTokenStoresResultAndStartsRetention) {
  FakeTokens tokens;
  const Transition t =
      Decided(Complete(kKey, 7, "receipt-9"), InProgress("worker-a", 7), kNow, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kOk);
  ASSERT_TRUE(t.write);
  EXPECT_EQ(t.stored.state, State::kCompleted);
  EXPECT_EQ(t.stored.result, "receipt-9");
  EXPECT_EQ(t.stored.token, 7u);
  EXPECT_EQ(t.stored.retention_expires_ms, kNow + kRetentionMs);
  EXPECT_EQ(t.stored.completed_ms, kNow);
  EXPECT_EQ(t.stored.updated_ms, kNow);
  EXPECT_EQ(tokens.calls(), 0);
}

TEST(LifecycleTest, CompleteWithNewestTokenSucceedsAfterLeaseLapsed) {
  FakeTokens tokens;
  const Record held = InProgress("worker-a", 7);
  const Transition t = Decided(Complete(kKey, 7), held, held.lease_expires_ms + 10'000, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kOk);
  EXPECT_EQ(t.stored.state, State::kCompleted);
}

TEST(LifecycleTest, CompleteRetryWithSameTokenAnswersAlreadyCompleted) {
  FakeTokens tokens;
  const Transition t = Decided(Complete(kKey, 7, "second"), Completed(7, "first"), kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kAlreadyCompleted);
  EXPECT_EQ(t.result.record.result, "first");
  EXPECT_FALSE(t.write);
}

TEST(LifecycleTest, CompleteWithOlderTokenAnswersStaleToken) {
  FakeTokens tokens;
  const Transition over_claim =
      Decided(Complete(kKey, 6), InProgress("worker-b", 7, 2), kNow, tokens);
  EXPECT_EQ(over_claim.result.outcome, Outcome::kStaleToken);
  EXPECT_FALSE(over_claim.write);

  const Transition over_completion = Decided(Complete(kKey, 6), Completed(7, "r"), kNow, tokens);
  EXPECT_EQ(over_completion.result.outcome, Outcome::kStaleToken);
  EXPECT_FALSE(over_completion.write);
}

// --- Release ---

TEST(LifecycleTest, ReleaseBelowMaxAttemptsReleasesFromNow) {
  FakeTokens tokens;
  const Transition t = Decided(Release(kKey, 7), InProgress("worker-a", 7), kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kOk);
  ASSERT_TRUE(t.write);
  EXPECT_EQ(t.stored.state, State::kReleased);
  EXPECT_EQ(t.stored.token, 7u);
  // Compaction's grace for abandoned records counts from the release.
  EXPECT_EQ(t.stored.lease_expires_ms, kNow);
  EXPECT_EQ(t.stored.updated_ms, kNow);
}

TEST(LifecycleTest, ReleaseAtMaxAttemptsPoisonsForFailedRetention) {
  FakeTokens tokens;
  const Transition t =
      Decided(Release(kKey, 7), InProgress("worker-a", 7, kMaxAttempts), kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kFailed);
  ASSERT_TRUE(t.write);
  EXPECT_EQ(t.stored.state, State::kFailed);
  EXPECT_EQ(t.stored.retention_expires_ms, kNow + kFailedRetentionMs);
}

TEST(LifecycleTest, ReleaseWithNewestTokenSucceedsAfterLeaseLapsed) {
  FakeTokens tokens;
  const Record held = InProgress("worker-a", 7);
  const Transition t = Decided(Release(kKey, 7), held, held.lease_expires_ms + 1, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kOk);
  EXPECT_EQ(t.stored.state, State::kReleased);
}

// --- Extend ---

TEST(LifecycleTest, ExtendRenewsLeaseFromNow) {
  FakeTokens tokens;
  const Transition t = Decided(Extend(kKey, 7, 90'000), InProgress("worker-a", 7), kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kOk);
  ASSERT_TRUE(t.write);
  EXPECT_EQ(t.stored.lease_expires_ms, kNow + 90'000);
  EXPECT_EQ(t.stored.state, State::kInProgress);
  EXPECT_EQ(t.stored.token, 7u);
  EXPECT_EQ(t.result.record.lease_expires_ms, kNow + 90'000);
}

TEST(LifecycleTest, ExtendWithNewestTokenRevivesLapsedLease) {
  FakeTokens tokens;
  const Record held = InProgress("worker-a", 7);
  const int64_t later = held.lease_expires_ms + 1;
  const Transition t = Decided(Extend(kKey, 7, kLeaseMs), held, later, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kOk);
  EXPECT_EQ(t.stored.lease_expires_ms, later + kLeaseMs);
}

// --- Shared refusals ---

TEST(LifecycleTest, CompleteReleaseExtendOfNothingAnswerNotFound) {
  FakeTokens tokens;
  for (const Operation& op : {Operation(Complete(kKey, 1)), Operation(Release(kKey, 1)),
                              Operation(Extend(kKey, 1, kLeaseMs))}) {
    const Transition t = Decided(op, std::nullopt, kNow, tokens);
    EXPECT_EQ(t.result.outcome, Outcome::kNotFound);
    EXPECT_EQ(t.result.record.ns, kNs);
    EXPECT_EQ(t.result.record.key, kKey);
    EXPECT_FALSE(t.write);
  }
}

TEST(LifecycleTest, CompleteReleaseExtendAfterRetentionEndedAnswerNotFound) {
  FakeTokens tokens;
  const Record done = Completed(7, "r");
  for (const Operation& op : {Operation(Complete(kKey, 7)), Operation(Release(kKey, 7)),
                              Operation(Extend(kKey, 7, kLeaseMs))}) {
    const Transition t = Decided(op, done, done.retention_expires_ms, tokens);
    EXPECT_EQ(t.result.outcome, Outcome::kNotFound);
    EXPECT_FALSE(t.write);
  }
}

TEST(LifecycleTest, CompleteAndExtendOfReleasedClaimAnswerStaleToken) {
  FakeTokens tokens;
  for (const Operation& op : {Operation(Complete(kKey, 7)), Operation(Extend(kKey, 7, kLeaseMs))}) {
    const Transition t = Decided(op, Released(7), kNow, tokens);
    EXPECT_EQ(t.result.outcome, Outcome::kStaleToken) << "operation #" << op.index();
    EXPECT_FALSE(t.write);
  }
}

TEST(LifecycleTest, CompleteAndExtendOfPoisonedKeyAnswerStaleToken) {
  FakeTokens tokens;
  // The poisoned record keeps the token of its last holder; that holder may
  // not finish or revive it.
  for (const Operation& op : {Operation(Complete(kKey, 7)), Operation(Extend(kKey, 7, kLeaseMs))}) {
    const Transition t = Decided(op, Failed(7), kNow, tokens);
    EXPECT_EQ(t.result.outcome, Outcome::kStaleToken) << "operation #" << op.index();
    EXPECT_FALSE(t.write);
  }
}

TEST(LifecycleTest, ReleaseRetryWithSameTokenAnswersOkAgainWithoutWriting) {
  FakeTokens tokens;
  const Record released = Released(7);
  const Transition t = Decided(Release(kKey, 7), released, kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kOk);
  EXPECT_EQ(t.result.record.state, State::kReleased);
  EXPECT_EQ(t.result.record.lease_expires_ms, released.lease_expires_ms);
  EXPECT_FALSE(t.write);
}

TEST(LifecycleTest, ReleaseRetryAfterPoisoningReleaseAnswersFailedAgain) {
  FakeTokens tokens;
  const Transition first =
      Decided(Release(kKey, 7), InProgress("worker-a", 7, kMaxAttempts), kNow, tokens);
  ASSERT_EQ(first.result.outcome, Outcome::kFailed);

  const Transition retry = Decided(Release(kKey, 7), first.stored, kNow + 10, tokens);
  EXPECT_EQ(retry.result.outcome, Outcome::kFailed);
  EXPECT_FALSE(retry.write);
}

TEST(LifecycleTest, ReleaseOfReleasedOrPoisonedKeyWithOtherTokenAnswersStaleToken) {
  FakeTokens tokens;
  for (const Record& current : {Released(7), Failed(7)}) {
    const Transition t = Decided(Release(kKey, 6), current, kNow, tokens);
    EXPECT_EQ(t.result.outcome, Outcome::kStaleToken) << StateName(current.state);
    EXPECT_FALSE(t.write);
  }
}

TEST(LifecycleTest, ReleaseAndExtendWithOlderTokenAnswerStaleToken) {
  FakeTokens tokens;
  const Record newer = InProgress("worker-b", 8, 2);
  for (const Operation& op : {Operation(Release(kKey, 7)), Operation(Extend(kKey, 7, kLeaseMs))}) {
    const Transition t = Decided(op, newer, kNow, tokens);
    EXPECT_EQ(t.result.outcome, Outcome::kStaleToken);
    EXPECT_EQ(t.result.record.token, 8u);
    EXPECT_FALSE(t.write);
  }
}

// --- Query ---

TEST(LifecycleTest, QueryReportsEffectiveStateAndNeverWrites) {
  FakeTokens tokens;
  const Transition live = Decided(Query(kKey), InProgress("worker-a", 7), kNow, tokens);
  EXPECT_EQ(live.result.outcome, Outcome::kFound);
  EXPECT_EQ(live.result.record.state, State::kInProgress);
  EXPECT_FALSE(live.write);

  const Transition done = Decided(Query(kKey), Completed(7, "r"), kNow, tokens);
  EXPECT_EQ(done.result.outcome, Outcome::kFound);
  EXPECT_EQ(done.result.record.state, State::kCompleted);
  EXPECT_EQ(done.result.record.result, "r");
  EXPECT_FALSE(done.write);
}

TEST(LifecycleTest, QueryOfLapsedLeaseReadsAbsentButKeepsHistory) {
  FakeTokens tokens;
  const Record held = InProgress("worker-a", 7);
  const Transition t = Decided(Query(kKey), held, held.lease_expires_ms, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kAbsent);
  EXPECT_EQ(t.result.record.state, State::kAbsent);
  EXPECT_EQ(t.result.record.token, 7u);
  EXPECT_FALSE(t.write);
}

TEST(LifecycleTest, QueryOfNothingReadsAbsent) {
  FakeTokens tokens;
  const Transition t = Decided(Query(kKey), std::nullopt, kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kAbsent);
  EXPECT_EQ(t.result.record.ns, kNs);
  EXPECT_EQ(t.result.record.key, kKey);
  EXPECT_EQ(t.result.record.token, 0u);
  EXPECT_FALSE(t.write);
}

// --- Holders: the authenticated identity of a claim (design.md §10) ---

// `op` made by `identity`.
template <typename Op>
Op By(Op op, const std::string& identity) {
  op.identity = identity;
  return op;
}

Record HeldBy(const std::string& identity, uint64_t token) {
  Record r = InProgress("worker-a", token);
  r.holder = identity;
  return r;
}

TEST(LifecycleTest, AnAuthenticatedClaimRecordsItsIdentityAsTheHolder) {
  FakeTokens tokens(100);
  const Transition t = Decided(By(Claim(kKey, "worker-a"), "id-a"), std::nullopt, kNow, tokens);

  ASSERT_TRUE(t.write);
  EXPECT_EQ(t.stored.holder, "id-a");
}

TEST(LifecycleTest, ATakeoverMakesTheNewIdentityTheHolder) {
  FakeTokens tokens(100);
  const Transition t =
      Decided(By(Claim(kKey, "worker-b"), "id-b"), HeldBy("id-a", 7), kNow + kLeaseMs, tokens);

  EXPECT_EQ(t.result.outcome, Outcome::kAcquired);
  EXPECT_TRUE(t.result.takeover);
  EXPECT_EQ(t.stored.holder, "id-b");
  EXPECT_EQ(t.stored.token, 100u);
}

TEST(LifecycleTest, ReentrantClaimNeedsTheHoldersIdentityAsWellAsItsOwner) {
  FakeTokens tokens;
  const Transition same =
      Decided(By(Claim(kKey, "worker-a"), "id-a"), HeldBy("id-a", 7), kNow, tokens);
  EXPECT_EQ(same.result.outcome, Outcome::kAcquired);
  EXPECT_EQ(same.result.record.token, 7u);

  const Transition other =
      Decided(By(Claim(kKey, "worker-a"), "id-b"), HeldBy("id-a", 7), kNow, tokens);
  EXPECT_EQ(other.result.outcome, Outcome::kInProgress);
  EXPECT_FALSE(other.write);
  EXPECT_EQ(tokens.calls(), 0);
}

// No oracle (design.md §10): another identity using the holder's token is
// answered exactly as a token that is not the newest, and nothing changes.
TEST(LifecycleTest, AnotherIdentityWithTheHoldersTokenIsAnsweredAsAStaleToken) {
  const Record held = HeldBy("id-a", 7);
  const Operation forged[] = {By(Complete(kKey, 7, "forged"), "id-b"), By(Release(kKey, 7), "id-b"),
                              By(Extend(kKey, 7), "id-b")};
  const Operation guessed[] = {By(Complete(kKey, 8, "forged"), "id-b"),
                               By(Release(kKey, 6), "id-b"), By(Extend(kKey, 9), "id-b")};
  for (int i = 0; i < 3; ++i) {
    for (int64_t now : {kNow, kNow + kLeaseMs}) {  // Also once the lease lapsed.
      FakeTokens tokens;
      const Transition t = Decided(forged[i], held, now, tokens);
      const Transition guess = Decided(guessed[i], held, now, tokens);
      EXPECT_FALSE(t.write);
      EXPECT_EQ(t.result.outcome, Outcome::kStaleToken);
      EXPECT_EQ(t.result.outcome, guess.result.outcome);
      EXPECT_TRUE(t.result.record == guess.result.record);
      EXPECT_TRUE(t.result.foreign_token) << "counted as a denial";
      EXPECT_FALSE(guess.result.foreign_token);
    }
  }
}

TEST(LifecycleTest, TheHolderUsesItsTokenAsBefore) {
  FakeTokens tokens;
  const Transition t =
      Decided(By(Complete(kKey, 7, "charged"), "id-a"), HeldBy("id-a", 7), kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kOk);
  EXPECT_EQ(t.stored.holder, "id-a");
}

TEST(LifecycleTest, AnOlderTokenOfAnotherIdentityIsStillJustStale) {
  // The normal end of a lost lease: the old worker learns it lost, as
  // without authentication.
  FakeTokens tokens;
  const Transition t =
      Decided(By(Complete(kKey, 6, "late"), "id-b"), HeldBy("id-a", 7), kNow, tokens);
  EXPECT_EQ(t.result.outcome, Outcome::kStaleToken);
}

TEST(LifecycleTest, HoldersAreNotCheckedWithoutAuthenticationOrForClaimsTakenWithout) {
  FakeTokens tokens;
  const Transition unauthenticated =
      Decided(Complete(kKey, 7, "charged"), HeldBy("id-a", 7), kNow, tokens);
  EXPECT_EQ(unauthenticated.result.outcome, Outcome::kOk);

  const Transition no_holder =
      Decided(By(Complete(kKey, 7, "charged"), "id-b"), HeldBy("", 7), kNow, tokens);
  EXPECT_EQ(no_holder.result.outcome, Outcome::kOk);
}

}  // namespace
}  // namespace dedup::storage
