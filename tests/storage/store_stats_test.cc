#include "storage/store_stats.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/storage/store_fixture.h"

// Store::Stats: records counted by effective state, from a sample of each
// record family that is kept while the family takes no write.
namespace dedup::storage {
namespace {

class StoreStatsTest : public StoreTest {
 protected:
  uint64_t Count(const StoreStats& stats, State state) {
    return stats.records_by_state[StatsIndex(state)];
  }
};

TEST_F(StoreStatsTest, CountsFollowWritesTimeAndFlushes) {
  const uint64_t a = Acquire("order-a", "worker-1");
  Acquire("order-b", "worker-1");
  const uint64_t c = Acquire("order-c", "worker-1");
  StoreStats stats = store_->Stats(100);
  EXPECT_GE(stats.families_walked, 1u);
  EXPECT_EQ(Count(stats, State::kInProgress), 3u);

  // Nothing written since: the sample is kept, and still counts all three.
  stats = store_->Stats(100);
  EXPECT_EQ(stats.families_walked, 0u);
  EXPECT_EQ(Count(stats, State::kInProgress), 3u);

  // A write is seen, by walking the one family it went to.
  EXPECT_EQ(Do(Complete("order-a", a)).outcome, Outcome::kOk);
  EXPECT_EQ(Do(Release("order-c", c)).outcome, Outcome::kOk);
  stats = store_->Stats(100);
  EXPECT_GE(stats.families_walked, 1u);
  EXPECT_EQ(Count(stats, State::kInProgress), 1u);
  EXPECT_EQ(Count(stats, State::kCompleted), 1u);
  EXPECT_EQ(Count(stats, State::kReleased), 1u);

  // Time alone moves records to "expired" without a walk: the kept sample
  // is evaluated at the new time.
  clock_.AdvanceMs(kLeaseMs + 1);
  stats = store_->Stats(100);
  EXPECT_EQ(stats.families_walked, 0u);
  EXPECT_EQ(Count(stats, State::kInProgress), 0u);
  EXPECT_EQ(Count(stats, State::kAbsent), 1u);  // order-b's lease lapsed.
  EXPECT_EQ(Count(stats, State::kCompleted), 1u);
  clock_.AdvanceMs(kRetentionMs);
  stats = store_->Stats(100);
  EXPECT_EQ(Count(stats, State::kCompleted), 0u);
  EXPECT_EQ(Count(stats, State::kAbsent), 2u);

  // A flush moves the records to files: walked again, the same counts.
  ASSERT_TRUE(store_->Flush().ok());
  stats = store_->Stats(100);
  EXPECT_GE(stats.families_walked, 1u);
  EXPECT_EQ(Count(stats, State::kAbsent), 2u);
  EXPECT_EQ(Count(stats, State::kReleased), 1u);

  // A new claim after the flush is counted.
  Acquire("order-d", "worker-2");
  stats = store_->Stats(100);
  EXPECT_EQ(Count(stats, State::kInProgress), 1u);
}

TEST_F(StoreStatsTest, AnotherSampleSizeWalksAgain) {
  for (int i = 0; i < 20; ++i) Acquire("order-" + std::to_string(i), "worker-1");
  StoreStats stats = store_->Stats(100);
  EXPECT_EQ(Count(stats, State::kInProgress), 20u);
  stats = store_->Stats(1);
  EXPECT_GE(stats.families_walked, 1u);
  // One record per family, extrapolated to each family's estimated count.
  EXPECT_GE(Count(stats, State::kInProgress), 1u);
}

}  // namespace
}  // namespace dedup::storage
