#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Compaction: the TTL filter drops expired records, and only those, and
// counts what it dropped.
namespace dedup::storage {
namespace {

// Records dropped by the TTL filter since the store opened, of any kind.
uint64_t TotalDrops(const Store& store) {
  const CompactionDrops& drops = store.compaction_drops();
  return drops.completed.load() + drops.failed.load() + drops.abandoned.load();
}

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

  clock_.AdvanceMs(kStartMs + kFailedRetentionMs - clock_.NowMs());
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

}  // namespace
}  // namespace dedup::storage
