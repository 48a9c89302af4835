// Query: reads a record without changing it (design.md §3, §4).

#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "coupons";

using QueryTest = ServerTest;

TEST_F(QueryTest, InProgressRecordReportsItsClaimButNotItsToken) {
  clock_.AdvanceMs(100);
  v1::ClaimRequest claim = ClaimOf(kNs, "coupon-1", "worker-a", 9000);
  claim.set_fingerprint("digest-1");
  const uint64_t token = Claim(claim).token();

  const v1::Record record = Query(QueryOf(kNs, "coupon-1")).record();

  EXPECT_EQ(record.namespace_(), kNs);
  EXPECT_EQ(record.key(), "coupon-1");
  EXPECT_EQ(record.state(), v1::STATE_IN_PROGRESS);
  EXPECT_EQ(record.owner(), "worker-a");
  EXPECT_GT(token, 0u);
  EXPECT_EQ(record.token(), 0u) << "a live claim's token is for its holder only";
  EXPECT_EQ(record.fingerprint(), "digest-1");
  EXPECT_EQ(record.lease_expires_ms(), kStartMs + 100 + 9000);
  EXPECT_EQ(record.attempts(), 1u);
  EXPECT_EQ(record.created_ms(), kStartMs + 100);
  EXPECT_EQ(record.updated_ms(), kStartMs + 100);
  EXPECT_EQ(record.completed_ms(), 0);
  EXPECT_EQ(record.result(), "");
}

TEST_F(QueryTest, CompletedRecordReportsItsResultAndRetention) {
  const uint64_t token = MustAcquire(kNs, "coupon-1", "worker-a");
  clock_.AdvanceMs(250);
  Complete(CompleteOf(kNs, "coupon-1", token, "deducted"));

  const v1::Record record = Query(QueryOf(kNs, "coupon-1")).record();

  EXPECT_EQ(record.state(), v1::STATE_COMPLETED);
  EXPECT_EQ(record.result(), "deducted");
  EXPECT_EQ(record.completed_ms(), kStartMs + 250);
  EXPECT_EQ(record.updated_ms(), kStartMs + 250);
  EXPECT_EQ(record.created_ms(), kStartMs);
  EXPECT_EQ(record.retention_expires_ms(), kStartMs + 250 + kDefaultRetentionMs);
  EXPECT_EQ(record.lease_expires_ms(), 0) << "a completed record has no lease";
  EXPECT_EQ(record.token(), token);
}

TEST_F(QueryTest, UnknownKeyIsAbsent) {
  const v1::Record record = Query(QueryOf(kNs, "never-claimed")).record();

  EXPECT_EQ(record.state(), v1::STATE_ABSENT);
  EXPECT_EQ(record.key(), "never-claimed");
  EXPECT_EQ(record.token(), 0u);
}

TEST_F(QueryTest, ExpiredLeaseReadsAsAbsentTheMomentItExpires) {
  Claim(ClaimOf(kNs, "coupon-1", "worker-a", 1000));
  clock_.AdvanceMs(999);
  ASSERT_EQ(Query(QueryOf(kNs, "coupon-1")).record().state(), v1::STATE_IN_PROGRESS);
  clock_.AdvanceMs(1);

  EXPECT_EQ(Query(QueryOf(kNs, "coupon-1")).record().state(), v1::STATE_ABSENT);
}

TEST_F(QueryTest, CompletedRecordReadsAsAbsentTheMomentRetentionEnds) {
  const uint64_t token = MustAcquire(kNs, "coupon-1", "worker-a");
  v1::CompleteRequest complete = CompleteOf(kNs, "coupon-1", token, "deducted");
  complete.set_retention_ms(2 * 3600'000);
  Complete(complete);
  clock_.AdvanceMs(2 * 3600'000 - 1);
  ASSERT_EQ(Query(QueryOf(kNs, "coupon-1")).record().state(), v1::STATE_COMPLETED);
  clock_.AdvanceMs(1);

  EXPECT_EQ(Query(QueryOf(kNs, "coupon-1")).record().state(), v1::STATE_ABSENT);
}

TEST_F(QueryTest, BinaryKeyIsKeptByteForByte) {
  constexpr char kRaw[] = "\0coupon\0\xff\x01";
  const std::string key(kRaw, sizeof(kRaw) - 1);
  MustAcquire(kNs, key, "worker-a");

  const v1::Record record = Query(QueryOf(kNs, key)).record();

  EXPECT_EQ(record.key(), key);
  EXPECT_EQ(record.owner(), "worker-a");
  const std::vector<v1::Record> scanned = Scan(ScanOf(kNs));
  ASSERT_EQ(scanned.size(), 1u);
  EXPECT_EQ(scanned[0].key(), key);
  EXPECT_EQ(Query(QueryOf(kNs, key.substr(0, 7))).record().state(), v1::STATE_ABSENT)
      << "a key is not confused with its prefix";
}

TEST_F(QueryTest, QueryDoesNotClaim) {
  Query(QueryOf(kNs, "coupon-1"));

  EXPECT_EQ(Claim(ClaimOf(kNs, "coupon-1", "worker-a")).outcome(), v1::ClaimResponse::ACQUIRED);
}

}  // namespace
}  // namespace dedup::server::test
