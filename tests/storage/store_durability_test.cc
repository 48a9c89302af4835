#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "storage/testing/rocksdb_env.h"
#include "tests/server/failing_file_system.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Durability: in either mode, what was written reads back after a clean
// reopen, and Flush leaves it readable.
namespace dedup::storage {
namespace {

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

}  // namespace
}  // namespace dedup::storage

namespace dedup::storage {
namespace {

// A background WAL sync that fails (buffered mode) means acknowledged
// writes may not be durable: the store reports it as a background error
// and refuses further writes, failing closed as after any disk fault.
TEST_F(StoreTest, AFailedBackgroundWalSyncFailsTheStoreClosed) {
  auto [fs, env] = server::test::FailingFileSystem::Make();
  StoreOptions options = Options();
  options.durability = Durability::kBuffered;
  options.buffered_sync_interval_ms = 10;
  SetRocksDbEnvForTesting(&options, env);
  ASSERT_NO_FATAL_FAILURE(Open(options));
  const uint64_t token = Acquire("before", "worker-a");
  const uint64_t other = Acquire("other", "worker-a");

  fs->FailSyncs();
  // Written to the WAL (no new token, so nothing synced on the way); the
  // background sync of it fails.
  ASSERT_EQ(Do(Complete("before", token)).outcome, Outcome::kOk);
  for (int i = 0; i < 200 && store_->BackgroundError().ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // Real WAL syncs.
  }

  EXPECT_FALSE(store_->BackgroundError().ok()) << "the failed sync is reported";
  absl::StatusOr<OpResult> after = store_->Apply(Complete("other", other));
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
  Close();
}

}  // namespace
}  // namespace dedup::storage
