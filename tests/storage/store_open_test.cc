#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
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

// How many column families of the data directory at `path` start with
// `prefix`.
int FamiliesNamed(const std::string& path, const std::string& prefix) {
  std::vector<std::string> names;
  EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
  return static_cast<int>(std::count_if(names.begin(), names.end(), [&](const std::string& name) {
    return absl::StartsWith(name, prefix);
  }));
}

// The keys of every record of kNs, scanned in pages of `page_size`.
std::vector<std::string> ScanAll(const Store& store, size_t page_size) {
  ScanQuery query;
  query.ns = kNs;
  ScanCursor cursor;
  std::vector<Record> records;
  for (int pages = 0; !cursor.done && pages < 10'000; ++pages) {
    absl::StatusOr<ScanPage> page = store.Scan(query, cursor, page_size);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    records.insert(records.end(), page->records.begin(), page->records.end());
    cursor = page->next;
  }
  return KeysOf(records);
}

// Options of a new data directory of `shards` shards in `dir`.
StoreOptions NewDirectory(const test::TempDir& dir, const Clock* clock, uint32_t shards) {
  StoreOptions options;
  options.path = dir.Sub("data");
  options.clock = clock;
  options.shards = shards;
  return options;
}

TEST(StoreOpenTest, ManyShardsShareAFewFamiliesEachShardItsOwnRange) {
  test::TempDir dir;
  ManualClock clock(kStartMs);
  StoreOptions options = NewDirectory(dir, &clock, 1024);
  std::vector<std::string> keys;
  std::vector<uint64_t> tokens;
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 300; ++i) {
      keys.push_back("order-" + std::to_string(i));
      absl::StatusOr<OpResult> claimed = (*store)->Apply(Claim(keys.back(), "worker-a"));
      ASSERT_TRUE(claimed.ok()) << claimed.status();
      ASSERT_EQ(claimed->outcome, Outcome::kAcquired) << keys.back();
      tokens.push_back(claimed->record.token);
    }
  }
  EXPECT_EQ(FamiliesNamed(options.path, "group-"), static_cast<int>(kShardFamilies));
  EXPECT_EQ(FamiliesNamed(options.path, "shard-"), 0);

  options.shards = 0;  // The directory's own count.
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->shard_count(), 1024u);
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<OpResult> found = (*store)->Apply(Query(keys[i]));
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->record.state, State::kInProgress) << keys[i];
    EXPECT_EQ(found->record.token, tokens[i]) << keys[i];
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(ScanAll(**store, 7), keys) << "every record once, across shards sharing families";
}

TEST(StoreOpenTest, ADirectoryWithAFamilyPerShardKeepsItsLayout) {
  test::TempDir dir;
  ManualClock clock(kStartMs);
  StoreOptions options = NewDirectory(dir, &clock, 32);
  options.shard_families = 32;  // As every directory was made before families were shared.
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Apply(Claim("order-1", "worker-a")).ok());
  }
  options.shard_families = 0;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(FamiliesNamed(options.path, "shard-"), 32);
  EXPECT_EQ(FamiliesNamed(options.path, "group-"), 0);
  absl::StatusOr<OpResult> found = (*store)->Apply(Query("order-1"));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->record.state, State::kInProgress);
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
