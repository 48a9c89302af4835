#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Fencing tokens across restarts: a token is never handed out twice, even
// after reopening or after compaction dropped the record that held it.
namespace dedup::storage {
namespace {

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

    // After a reopen storage time may run up to the clock-step tolerance
    // ahead of the wall clock (it resumes at the persisted high-water
    // mark), and the retention counts from storage time.
    clock_.AdvanceMs(kRetentionMs + options.clock_step_tolerance_ms);
    const uint64_t dropped_before = store_->compaction_drops().completed.load();
    ASSERT_TRUE(store_->CompactAll().ok());
    EXPECT_EQ(store_->compaction_drops().completed.load(), dropped_before + 1) << round;
    ASSERT_EQ(Do(Query("order-1")).record.token, 0u) << "record not dropped";
    if (round % 2 == 1) {
      ASSERT_NO_FATAL_FAILURE(Open(options));
    }
  }
}

}  // namespace
}  // namespace dedup::storage
