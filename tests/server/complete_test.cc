// Complete: marks a claimed key done and stores the result that every later
// duplicate gets back (design.md §3, §4).

#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "payments";

using CompleteTest = ServerTest;

TEST_F(CompleteTest, CompleteWithTheTokenIsOkAndKeepsTheResultForTheDefaultRetention) {
  const uint64_t token = MustAcquire(kNs, "pay-1", "worker-a");
  clock_.AdvanceMs(500);

  const v1::CompleteResponse done = Complete(CompleteOf(kNs, "pay-1", token, "receipt-1"));

  EXPECT_EQ(done.outcome(), v1::CompleteResponse::OK);
  EXPECT_EQ(done.retention_expires_ms(), kStartMs + 500 + kDefaultRetentionMs);
}

TEST_F(CompleteTest, RetentionAskedForRunsFromCompletion) {
  const uint64_t token = MustAcquire(kNs, "pay-1", "worker-a");
  v1::CompleteRequest request = CompleteOf(kNs, "pay-1", token, "receipt-1");
  request.set_retention_ms(2 * 3600'000);

  EXPECT_EQ(Complete(request).retention_expires_ms(), kStartMs + 2 * 3600'000);
}

TEST_F(CompleteTest, DuplicateClaimGetsTheStoredResultAndCompletionTime) {
  const uint64_t token = MustAcquire(kNs, "pay-1", "worker-a");
  clock_.AdvanceMs(700);
  const std::string result("receipt\0with-binary\xff", 20);
  Complete(CompleteOf(kNs, "pay-1", token, result));
  clock_.AdvanceMs(5000);

  const v1::ClaimResponse duplicate = Claim(ClaimOf(kNs, "pay-1", "worker-b"));

  EXPECT_EQ(duplicate.outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(duplicate.result(), result);
  EXPECT_EQ(duplicate.completed_ms(), kStartMs + 700);
  EXPECT_EQ(duplicate.token(), token);
}

TEST_F(CompleteTest, TheWinnerClaimingAgainAlsoGetsCompleted) {
  const uint64_t token = MustAcquire(kNs, "pay-1", "worker-a");
  Complete(CompleteOf(kNs, "pay-1", token, "receipt-1"));

  const v1::ClaimResponse again = Claim(ClaimOf(kNs, "pay-1", "worker-a"));

  EXPECT_EQ(again.outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(again.result(), "receipt-1");
}

TEST_F(CompleteTest, RetriedCompleteIsAlreadyCompletedAndKeepsTheFirstResult) {
  const uint64_t token = MustAcquire(kNs, "pay-1", "worker-a");
  const v1::CompleteResponse first = Complete(CompleteOf(kNs, "pay-1", token, "receipt-1"));
  clock_.AdvanceMs(1000);

  const v1::CompleteResponse retry =
      Complete(CompleteOf(kNs, "pay-1", token, "receipt-from-retry"));

  EXPECT_EQ(retry.outcome(), v1::CompleteResponse::ALREADY_COMPLETED);
  EXPECT_EQ(retry.retention_expires_ms(), first.retention_expires_ms());
  EXPECT_EQ(Claim(ClaimOf(kNs, "pay-1", "worker-b")).result(), "receipt-1");
}

TEST_F(CompleteTest, CompleteByTheHolderOfAnExpiredLeaseSucceedsWhileNobodyClaimedSince) {
  const uint64_t token = Claim(ClaimOf(kNs, "pay-1", "worker-a", 1000)).token();
  clock_.AdvanceMs(5000);

  EXPECT_EQ(Complete(CompleteOf(kNs, "pay-1", token, "late")).outcome(), v1::CompleteResponse::OK);
  EXPECT_EQ(Claim(ClaimOf(kNs, "pay-1", "worker-b")).result(), "late");
}

TEST_F(CompleteTest, CompleteWithATokenOlderThanATakeoverIsStale) {
  const uint64_t old_token = Claim(ClaimOf(kNs, "pay-1", "worker-a", 1000)).token();
  clock_.AdvanceMs(1000);
  const uint64_t new_token = MustAcquire(kNs, "pay-1", "worker-b");

  const v1::CompleteResponse stale = Complete(CompleteOf(kNs, "pay-1", old_token, "stale"));

  EXPECT_EQ(stale.outcome(), v1::CompleteResponse::STALE_TOKEN);
  const v1::Record record = Query(QueryOf(kNs, "pay-1")).record();
  EXPECT_EQ(record.state(), v1::STATE_IN_PROGRESS) << "the new holder keeps the key";
  EXPECT_EQ(record.owner(), "worker-b");
  EXPECT_EQ(Extend(ExtendOf(kNs, "pay-1", new_token)).outcome(), v1::ExtendResponse::OK);
}

TEST_F(CompleteTest, CompleteWithATokenOlderThanTheCompletionIsStale) {
  const uint64_t old_token = Claim(ClaimOf(kNs, "pay-1", "worker-a", 1000)).token();
  clock_.AdvanceMs(1000);
  const uint64_t new_token = MustAcquire(kNs, "pay-1", "worker-b");
  Complete(CompleteOf(kNs, "pay-1", new_token, "by-b"));

  EXPECT_EQ(Complete(CompleteOf(kNs, "pay-1", old_token, "by-a")).outcome(),
            v1::CompleteResponse::STALE_TOKEN);
  EXPECT_EQ(Claim(ClaimOf(kNs, "pay-1", "worker-c")).result(), "by-b");
}

TEST_F(CompleteTest, CompleteOfAKeyNeverClaimedIsNotFound) {
  EXPECT_EQ(Complete(CompleteOf(kNs, "never-claimed", 42, "x")).outcome(),
            v1::CompleteResponse::NOT_FOUND);
}

TEST_F(CompleteTest, CompletionIsForgottenWhenRetentionEnds) {
  const uint64_t token = MustAcquire(kNs, "pay-1", "worker-a");
  Complete(CompleteOf(kNs, "pay-1", token, "receipt-1"));
  clock_.AdvanceMs(kDefaultRetentionMs);

  const v1::ClaimResponse redelivery = Claim(ClaimOf(kNs, "pay-1", "worker-b"));

  EXPECT_EQ(redelivery.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_GT(redelivery.token(), token) << "tokens never go backwards";
}

}  // namespace
}  // namespace dedup::server::test
