// Release: a holder gives the key up so a retry may run; too many attempts
// poison the key as FAILED (design.md §3, §4).

#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "shipments";
// Declared with max_attempts: 2.
constexpr char kFragileNs[] = "fragile";

class ReleaseTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      namespaces {
        name: "fragile"
        policy { max_attempts: 2 }
      }
    )pb";
  }
};

TEST_F(ReleaseTest, ReleaseWithTheTokenIsOkAndLeavesTheKeyReleased) {
  const uint64_t token = MustAcquire(kNs, "ship-1", "worker-a");

  const v1::ReleaseResponse released = Release(ReleaseOf(kNs, "ship-1", token));

  EXPECT_EQ(released.outcome(), v1::ReleaseResponse::OK);
  EXPECT_EQ(released.attempts(), 1u);
  EXPECT_EQ(Query(QueryOf(kNs, "ship-1")).record().state(), v1::STATE_RELEASED);
}

TEST_F(ReleaseTest, NextClaimAfterReleaseAcquiresWithALargerToken) {
  const uint64_t token = MustAcquire(kNs, "ship-1", "worker-a");
  Release(ReleaseOf(kNs, "ship-1", token));

  const v1::ClaimResponse retry = Claim(ClaimOf(kNs, "ship-1", "worker-b"));

  EXPECT_EQ(retry.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_GT(retry.token(), token);
  EXPECT_EQ(retry.attempts(), 2u);
  EXPECT_FALSE(retry.takeover()) << "a released key is handed on, not taken over";
}

TEST_F(ReleaseTest, ReleaseThatReachesMaxAttemptsPoisonsTheKey) {
  const uint64_t first = MustAcquire(kFragileNs, "ship-1", "worker-a");
  ASSERT_EQ(Release(ReleaseOf(kFragileNs, "ship-1", first)).outcome(), v1::ReleaseResponse::OK);
  const uint64_t second = MustAcquire(kFragileNs, "ship-1", "worker-b");

  const v1::ReleaseResponse last = Release(ReleaseOf(kFragileNs, "ship-1", second));

  EXPECT_EQ(last.outcome(), v1::ReleaseResponse::FAILED);
  EXPECT_EQ(last.attempts(), 2u);
  EXPECT_EQ(Claim(ClaimOf(kFragileNs, "ship-1", "worker-c")).outcome(), v1::ClaimResponse::FAILED);
  EXPECT_EQ(Query(QueryOf(kFragileNs, "ship-1")).record().state(), v1::STATE_FAILED);
}

TEST_F(ReleaseTest, MaxAttemptsIsPerNamespace) {
  // The default policy allows five attempts: a second release is still OK.
  const uint64_t first = MustAcquire(kNs, "ship-1", "worker-a");
  Release(ReleaseOf(kNs, "ship-1", first));
  const uint64_t second = MustAcquire(kNs, "ship-1", "worker-b");

  EXPECT_EQ(Release(ReleaseOf(kNs, "ship-1", second)).outcome(), v1::ReleaseResponse::OK);
}

TEST_F(ReleaseTest, AbandonedLeasesCountTowardsMaxAttempts) {
  Claim(ClaimOf(kFragileNs, "ship-1", "worker-a", 1000));
  clock_.AdvanceMs(1000);
  Claim(ClaimOf(kFragileNs, "ship-1", "worker-b", 1000));
  clock_.AdvanceMs(1000);

  EXPECT_EQ(Claim(ClaimOf(kFragileNs, "ship-1", "worker-c")).outcome(), v1::ClaimResponse::FAILED);
}

TEST_F(ReleaseTest, ReleaseWithATokenOlderThanATakeoverIsStale) {
  const uint64_t old_token = Claim(ClaimOf(kNs, "ship-1", "worker-a", 1000)).token();
  clock_.AdvanceMs(1000);
  MustAcquire(kNs, "ship-1", "worker-b");

  EXPECT_EQ(Release(ReleaseOf(kNs, "ship-1", old_token)).outcome(),
            v1::ReleaseResponse::STALE_TOKEN);
  EXPECT_EQ(Query(QueryOf(kNs, "ship-1")).record().state(), v1::STATE_IN_PROGRESS);
}

TEST_F(ReleaseTest, ReleaseOfACompletedKeyIsStale) {
  const uint64_t token = MustAcquire(kNs, "ship-1", "worker-a");
  Complete(CompleteOf(kNs, "ship-1", token, "shipped"));

  EXPECT_EQ(Release(ReleaseOf(kNs, "ship-1", token)).outcome(), v1::ReleaseResponse::STALE_TOKEN);
  EXPECT_EQ(Query(QueryOf(kNs, "ship-1")).record().state(), v1::STATE_COMPLETED);
}

TEST_F(ReleaseTest, ReleaseOfAKeyNeverClaimedIsNotFound) {
  EXPECT_EQ(Release(ReleaseOf(kNs, "never-claimed", 7)).outcome(), v1::ReleaseResponse::NOT_FOUND);
}

}  // namespace
}  // namespace dedup::server::test
