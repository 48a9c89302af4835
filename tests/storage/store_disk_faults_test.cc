#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "storage/testing/rocksdb_env.h"
#include "tests/common/fault_injection_file_system.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// A full disk and a failing background sync (design.md §5): writes are
// refused with UNAVAILABLE and reads keep answering. A full disk is
// recoverable in place once space returns; a failed sync is not (fail
// closed). Nothing acknowledged is lost either way.
namespace dedup::storage {
namespace {

using test::FaultInjectionFileSystem;

class StoreDiskFaultsTest : public StoreTest {
 protected:
  // The store closes before the file system it runs on goes.
  void TearDown() override { Close(); }

  void OpenOnFaults(Durability durability, bool group_sync = false) {
    StoreOptions options = Options();
    options.durability = durability;
    options.group_sync = group_sync;
    options.buffered_sync_interval_ms = 10;
    SetRocksDbEnvForTesting(&options, made_.second);
    ASSERT_NO_FATAL_FAILURE(Open(options));
  }

  FaultInjectionFileSystem& fs() { return *made_.first; }

  std::pair<std::shared_ptr<FaultInjectionFileSystem>, std::shared_ptr<rocksdb::Env>> made_ =
      FaultInjectionFileSystem::Make();
};

TEST_F(StoreDiskFaultsTest, FullDiskRefusesWritesKeepsReadsAndRecoversWhenSpaceReturns) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync));
  const uint64_t token = Acquire("order-1", "worker-a");
  ASSERT_EQ(Do(Complete("order-1", token, "receipt")).outcome, Outcome::kOk);

  fs().SetSpaceLeft(0);
  EXPECT_EQ(store_->Apply(Claim("order-2", "worker-a")).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::IsResourceExhausted(store_->BackgroundError())) << store_->BackgroundError();
  EXPECT_EQ(Do(Query("order-1")).record.result, "receipt");
  EXPECT_EQ(Do(Claim("order-1", "worker-b")).outcome, Outcome::kCompleted);  // Reads only.
  EXPECT_FALSE(store_->Recover().ok());                                      // Still no space.
  EXPECT_EQ(store_->Apply(Claim("order-2", "worker-a")).status().code(),
            absl::StatusCode::kUnavailable);

  fs().SetSpaceLeft(FaultInjectionFileSystem::kUnlimited);
  ASSERT_TRUE(store_->Recover().ok()) << store_->BackgroundError();
  EXPECT_TRUE(store_->BackgroundError().ok());
  const uint64_t later = Acquire("order-2", "worker-a");
  EXPECT_EQ(Do(Query("order-1")).record.result, "receipt");

  Close();
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync));
  EXPECT_EQ(Do(Query("order-1")).record.state, State::kCompleted);
  EXPECT_EQ(Do(Query("order-2")).record.token, later);
}

// RocksDB 7.8 also raises a background error when SyncWAL fails, so this
// passes with or without the store's own check of the sync's result; the
// check keeps the store failing closed whatever RocksDB does.
TEST_F(StoreDiskFaultsTest, FailedBackgroundSyncRefusesWritesUntilRestart) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kBuffered));
  const uint64_t token = Acquire("order-1", "worker-a");

  fs().FailSyncs();
  // The background sync runs every 10 ms; give it a few seconds of slack
  // on a loaded machine.
  for (int i = 0; i < 500 && store_->BackgroundError().ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(store_->BackgroundError().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Apply(Claim("order-2", "worker-a")).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Do(Query("order-1")).record.token, token);
  EXPECT_FALSE(store_->Recover().ok());
}

// Group sync (StoreOptions::group_sync): a failed sync fails every call
// waiting for it, so none is acknowledged, and every write after it, as a
// failed background sync does; reads keep answering.
TEST_F(StoreDiskFaultsTest, FailedGroupSyncFailsItsWaitersAndRefusesWritesUntilRestart) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync, /*group_sync=*/true));
  auto after_sync = [this] {
    std::promise<absl::Status> synced;
    store_->AfterSync([&synced](absl::Status status) { synced.set_value(std::move(status)); });
    return synced.get_future().get();
  };
  const uint64_t token = Acquire("order-1", "worker-a");
  ASSERT_TRUE(after_sync().ok());

  fs().FailSyncs();
  // A write that draws no token, so that no token ceiling is synced first.
  ASSERT_EQ(Do(Complete("order-1", token)).outcome, Outcome::kOk);
  EXPECT_EQ(after_sync().code(), absl::StatusCode::kUnavailable)
      << "a completion was acknowledged although its sync failed";
  EXPECT_EQ(store_->BackgroundError().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Apply(Claim("order-3", "worker-a")).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Do(Query("order-1")).record.token, token);
  EXPECT_FALSE(store_->Recover().ok());
}

}  // namespace
}  // namespace dedup::storage
