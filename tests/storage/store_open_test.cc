#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "storage/clock.h"
#include "storage/operation.h"
#include "storage/store.h"
#include "tests/common/temp_dir.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Opening a data directory: options are checked, the shard count is fixed
// when the directory is created, and one store at a time may hold it.
namespace dedup::storage {
namespace {

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

}  // namespace
}  // namespace dedup::storage
