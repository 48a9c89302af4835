#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/key_codec.h"
#include "storage/operation.h"
#include "storage/store.h"
#include "storage/store_stats.h"
#include "storage/testing/rocksdb_env.h"
#include "tests/common/fault_injection_file_system.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Corruption (design.md §5): a stored record that cannot be decoded, or a
// block that fails its checksum, answers DATA_LOSS for the keys it holds and
// for nothing else; it is counted, and Scan and Stats count what they cannot
// decode instead of skipping it silently.
namespace dedup::storage {
namespace {

using test::FaultInjectionFileSystem;

class StoreCorruptionTest : public StoreTest {
 protected:
  // The store closes before the file system it may run on goes.
  void TearDown() override { Close(); }

  // Overwrites the stored value of `key` (in kNs) with bytes no codec
  // version reads, through RocksDB itself while the store is closed.
  void StoreGarbage(const std::string& key) {
    Close();
    const std::string path = Options().path;
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names)
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), path, families, &handles, &raw).ok());
    // The key's family and its key there: a family per shard, or shards
    // sharing "group-" families with their prefix (data_dir.h).
    const uint32_t shard = ShardOf(kNs, key, kShards);
    const auto groups =
        static_cast<uint32_t>(std::count_if(names.begin(), names.end(), [](const std::string& n) {
          return n.rfind("group-", 0) == 0;
        }));
    char group[32];
    std::snprintf(group, sizeof(group), "group-%04u", groups == 0 ? 0 : shard % groups);
    const std::string family = groups == 0 ? ShardName(shard) : std::string(group);
    const std::string stored =
        (groups == 0 ? std::string() : ShardKeyPrefix(shard)) + EncodeStorageKey(kNs, key);
    int written = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] != family) continue;
      EXPECT_TRUE(
          raw->Put(rocksdb::WriteOptions(), handles[i], stored, std::string("\xff\x01garbage", 9))
              .ok());
      ++written;
    }
    EXPECT_EQ(written, 1) << "family " << family;
    for (rocksdb::ColumnFamilyHandle* handle : handles) raw->DestroyColumnFamilyHandle(handle);
    delete raw;
    ASSERT_NO_FATAL_FAILURE(Open(Options()));
  }

  std::pair<std::shared_ptr<FaultInjectionFileSystem>, std::shared_ptr<rocksdb::Env>> made_ =
      FaultInjectionFileSystem::Make();
};

TEST_F(StoreCorruptionTest, UndecodableRecordAnswersDataLossForThatKeyOnly) {
  const uint64_t token = Acquire("order-1", "worker-a");
  Do(Complete("order-1", token));
  const uint64_t other = Acquire("order-2", "worker-a");
  ASSERT_NO_FATAL_FAILURE(StoreGarbage("order-1"));

  EXPECT_EQ(store_->Apply(Query("order-1")).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store_->Apply(Claim("order-1", "worker-b")).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Do(Query("order-2")).record.token, other);
  // In one batch, only the damaged key's answer is an error.
  const Operation batch[] = {Query("order-1"), Query("order-2")};
  auto answers = store_->Apply(batch);
  EXPECT_EQ(answers[0].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(answers[1].ok()) << answers[1].status();
  EXPECT_EQ(store_->Stats(100).corrupt_records, 3u);
}

TEST_F(StoreCorruptionTest, ScanAndStatsCountWhatTheyCannotDecode) {
  Acquire("order-1", "worker-a");
  Acquire("order-2", "worker-a");
  ASSERT_NO_FATAL_FAILURE(StoreGarbage("order-1"));

  ScanQuery query;
  query.ns = kNs;
  uint64_t undecodable = 0;
  std::vector<Record> records;
  for (ScanCursor cursor; !cursor.done;) {
    absl::StatusOr<ScanPage> page = store_->Scan(query, cursor, 10);
    ASSERT_TRUE(page.ok()) << page.status();
    undecodable += page->undecodable;
    records.insert(records.end(), page->records.begin(), page->records.end());
    cursor = page->next;
  }
  EXPECT_EQ(KeysOf(records), std::vector<std::string>{"order-2"});
  EXPECT_EQ(undecodable, 1u);
  const StoreStats stats = store_->Stats(100);
  EXPECT_EQ(stats.records_by_state[kCorruptStatsIndex], 1u);
  EXPECT_EQ(stats.records_by_state[StatsIndex(State::kInProgress)], 1u);
  EXPECT_EQ(stats.corrupt_records, 1u);
}

TEST_F(StoreCorruptionTest, CorruptBlockAnswersDataLossForItsKeysOnly) {
  FaultInjectionFileSystem* fs = made_.first.get();
  StoreOptions options = Options();
  SetRocksDbEnvForTesting(&options, made_.second);
  ASSERT_NO_FATAL_FAILURE(Open(options));
  // Two keys of different shards, so in different files.
  const std::string a = "order-1";
  std::string b = "order-2";
  for (int i = 3; ShardOf(kNs, b, kShards) == ShardOf(kNs, a, kShards); ++i) {
    b = "order-" + std::to_string(i);
  }
  const uint64_t token_a = Acquire(a, "worker-a");
  const uint64_t token_b = Acquire(b, "worker-a");
  ASSERT_TRUE(store_->Flush().ok());
  ASSERT_NO_FATAL_FAILURE(Open(options));  // Nothing cached: reads go to the files.

  fs->CorruptNextRead(".sst");
  EXPECT_EQ(store_->Apply(Query(a)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(fs->ReadFaultPending());
  EXPECT_EQ(Do(Query(b)).record.token, token_b);
  EXPECT_EQ(Do(Query(a)).record.token, token_a);  // The damage was in that one read.
  EXPECT_EQ(store_->Stats(100).corrupt_records, 1u);
}

}  // namespace
}  // namespace dedup::storage
