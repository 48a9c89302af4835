// Extend: the holder renews its lease while the work runs (design.md §4).

#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "reports";

using ExtendTest = ServerTest;

TEST_F(ExtendTest, ExtendRenewsTheLeaseFromNow) {
  const uint64_t token = Claim(ClaimOf(kNs, "report-1", "worker-a", 1000)).token();
  clock_.AdvanceMs(800);
  v1::ExtendRequest request = ExtendOf(kNs, "report-1", token);
  request.set_lease_ms(5000);

  const v1::ExtendResponse extended = Extend(request);

  EXPECT_EQ(extended.outcome(), v1::ExtendResponse::OK);
  EXPECT_EQ(extended.lease_expires_ms(), kStartMs + 800 + 5000);
}

TEST_F(ExtendTest, ExtendedLeaseKeepsDuplicatesOutPastTheFirstExpiry) {
  const uint64_t token = Claim(ClaimOf(kNs, "report-1", "worker-a", 1000)).token();
  clock_.AdvanceMs(800);
  v1::ExtendRequest request = ExtendOf(kNs, "report-1", token);
  request.set_lease_ms(5000);
  Extend(request);
  clock_.AdvanceMs(1000);

  const v1::ClaimResponse duplicate = Claim(ClaimOf(kNs, "report-1", "worker-b"));

  EXPECT_EQ(duplicate.outcome(), v1::ClaimResponse::IN_PROGRESS);
  EXPECT_EQ(duplicate.lease_expires_ms(), kStartMs + 800 + 5000);
}

TEST_F(ExtendTest, ExtendWithoutALeaseUsesTheNamespaceDefault) {
  const uint64_t token = Claim(ClaimOf(kNs, "report-1", "worker-a", 1000)).token();
  clock_.AdvanceMs(300);

  const v1::ExtendResponse extended = Extend(ExtendOf(kNs, "report-1", token));

  EXPECT_EQ(extended.outcome(), v1::ExtendResponse::OK);
  EXPECT_EQ(extended.lease_expires_ms(), kStartMs + 300 + kDefaultLeaseMs);
}

TEST_F(ExtendTest, ExtendWithATokenOlderThanATakeoverIsStale) {
  const uint64_t old_token = Claim(ClaimOf(kNs, "report-1", "worker-a", 1000)).token();
  clock_.AdvanceMs(1000);
  const v1::ClaimResponse takeover = Claim(ClaimOf(kNs, "report-1", "worker-b"));
  ASSERT_EQ(takeover.outcome(), v1::ClaimResponse::ACQUIRED);

  const v1::ExtendResponse stale = Extend(ExtendOf(kNs, "report-1", old_token));

  EXPECT_EQ(stale.outcome(), v1::ExtendResponse::STALE_TOKEN);
  EXPECT_EQ(Query(QueryOf(kNs, "report-1")).record().lease_expires_ms(),
            takeover.lease_expires_ms())
      << "a stale extend must not move the new holder's lease";
}

TEST_F(ExtendTest, ExtendOfAKeyNeverClaimedIsNotFound) {
  EXPECT_EQ(Extend(ExtendOf(kNs, "never-claimed", 3)).outcome(), v1::ExtendResponse::NOT_FOUND);
}

}  // namespace
}  // namespace dedup::server::test
