// DataDir's view of RocksDB's write stalls (storage/data_dir.h), which
// the server reads to keep stalled writes off gRPC's threads.

#include "storage/data_dir.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/compaction_drops.h"
#include "tests/common/temp_dir.h"

namespace dedup::storage {
namespace {

class DataDirStallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions options;
    options.path = dir_.Sub("data");
    options.shards = 2;
    absl::StatusOr<std::unique_ptr<DataDir>> data = DataDir::Open(options, &drops_);
    ASSERT_TRUE(data.ok()) << data.status();
    data_ = std::move(*data);
  }

  dedup::test::TempDir dir_;
  CompactionDrops drops_;
  std::unique_ptr<DataDir> data_;
};

// With flushes paused, shard 0's small memtables fill until RocksDB
// stops its writes; resumed, the flushes end the stop.
TEST_F(DataDirStallTest, ReportsAStallWhileRocksDbStopsWritesAndNotAfter) {
  EXPECT_FALSE(data_->WritesStalled()) << "a fresh directory";
  ASSERT_TRUE(data_->db()
                  ->SetOptions(data_->shard(0),
                               {{"write_buffer_size", "1048576"}, {"max_write_buffer_number", "2"}})
                  .ok());
  ASSERT_TRUE(data_->db()->PauseBackgroundWork().ok());
  rocksdb::WriteOptions no_wait;
  no_wait.no_slowdown = true;  // Answers Incomplete instead of waiting.
  const std::string value(4096, 'v');
  bool stopped = false;
  for (int i = 0; i < 10'000 && !stopped; ++i) {
    const rocksdb::Status put =
        data_->db()->Put(no_wait, data_->shard(0), "key-" + std::to_string(i), value);
    ASSERT_TRUE(put.ok() || put.IsIncomplete()) << put.ToString();
    stopped = put.IsIncomplete();
  }
  ASSERT_TRUE(stopped) << "two full memtables waiting for a flush stop writes";

  EXPECT_TRUE(data_->WritesStalled());

  ASSERT_TRUE(data_->db()->ContinueBackgroundWork().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (data_->WritesStalled() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(data_->WritesStalled()) << "the flushes ended the stop";
}

}  // namespace
}  // namespace dedup::storage
