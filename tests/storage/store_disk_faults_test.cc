#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rocksdb/write_batch.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/replication_log.h"
#include "storage/store.h"
#include "storage/testing/rocksdb_env.h"
#include "storage/wal_fence.h"
#include "tests/common/fault_injection_file_system.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// A full disk and a failing background sync (design.md §5): writes are
// refused with UNAVAILABLE and reads keep answering. A full disk is
// recoverable in place once space returns; a failed sync is not (fail
// closed). Nothing acknowledged is lost either way. A write stalled on the
// disk holds up only calls that write on its keys' stripes.
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

// A sync of the WAL that the replication log made failed: the store fails
// closed as after a failed sync of its own (Replicator::LogSyncFailed).
TEST_F(StoreDiskFaultsTest, FailClosedRefusesWritesUntilRestart) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync));
  const uint64_t token = Acquire("order-1", "worker-a");
  store_->FailClosed(absl::UnavailableError("syncing the log: injected"));
  EXPECT_EQ(store_->BackgroundError().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(store_->BackgroundError().message().find("syncing the log: injected"),
            absl::string_view::npos)
      << store_->BackgroundError();
  EXPECT_EQ(store_->Apply(Claim("order-2", "worker-a")).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Do(Query("order-1")).record.token, token);
  EXPECT_FALSE(store_->Recover().ok());
  Close();
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync));
  Acquire("order-2", "worker-a");
}

// A full disk fences the replication log's sync off before it begins
// (RESOURCE_EXHAUSTED): nothing was lost, so once space returns and the
// data directory recovers, the log takes appends again. Any other failed
// sync stops it for good (ReplicationLogPowerLossTest).
TEST_F(StoreDiskFaultsTest, AFullDiskStopsTheReplicationLogOnlyUntilItRecovers) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync));
  absl::StatusOr<std::unique_ptr<ReplicationLog>> log = store_->OpenReplicationLog();
  ASSERT_TRUE(log.ok()) << log.status();
  auto append = [&log] {
    rocksdb::WriteBatch batch;
    EXPECT_TRUE(batch.Put("k", "v").ok());
    return (*log)->AppendAll({{0, 1, batch.Data()}}, /*sync=*/false).status();
  };
  ASSERT_TRUE(append().ok());
  fs().SetSpaceLeft(0);
  EXPECT_FALSE(append().ok());
  const absl::Status fenced = (*log)->SyncAppends();
  EXPECT_TRUE(absl::IsResourceExhausted(fenced)) << fenced;

  fs().SetSpaceLeft(FaultInjectionFileSystem::kUnlimited);
  ASSERT_TRUE(store_->Recover().ok()) << store_->BackgroundError();
  const absl::Status appended = append();
  EXPECT_TRUE(appended.ok()) << appended;
  EXPECT_TRUE((*log)->SyncAppends().ok());
  EXPECT_EQ((*log)->DurableSeq(0), (*log)->Last(0).seq);
  log->reset();
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

// The disk fills up under fsync load: WAL appends fail while the
// group-sync thread syncs without pause. The store must refuse writes with
// a background error, not abort. A sync must never start on a log whose
// append has failed before that failure is recorded as the background
// error: RocksDB asserts against it, and its Debian build keeps assertions
// (WalFence). That window is microseconds wide, hence the rounds, each on a
// fresh store: a build that synced beside writes in flight with no fence
// aborted in each of 3 runs of them. The suite's name keeps it out of the
// storage runs on other memtables and family layouts (CMakeLists.txt),
// which the WAL does not depend on.
class WalSyncFaultsTest : public StoreDiskFaultsTest {
 protected:
  // Two writers claiming fresh keys, and a caller of AfterSync that keeps
  // the group-sync thread syncing, until destroyed.
  class Load {
   public:
    // With `sync`, that caller calls it instead of AfterSync.
    explicit Load(Store* store, std::function<void()> sync = nullptr) {
      threads_.emplace_back([this, store, sync = std::move(sync)] {
        while (!stop_) {
          if (sync != nullptr) {
            sync();
            continue;
          }
          std::promise<absl::Status> synced;
          store->AfterSync([&synced](absl::Status status) { synced.set_value(std::move(status)); });
          synced.get_future().wait();
        }
      });
      for (int w = 0; w < 2; ++w) {
        threads_.emplace_back([this, store, w] {
          for (uint64_t i = 0; !stop_; ++i) {
            if (store->Apply(Claim(absl::StrCat("order-", w, "-", i), "worker-a")).ok()) {
              ++written_;
            } else {
              std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
          }
        });
      }
    }
    ~Load() {
      stop_ = true;
      for (std::thread& thread : threads_) thread.join();
    }
    uint64_t written() const { return written_.load(); }

   private:
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> written_{0};
    std::vector<std::thread> threads_;
  };

  // Once `load` has written 50 claims, fills the disk (at `*filled`) and
  // waits for the store to refuse writes for it.
  void FillDiskUnder(const Load& load, int round, absl::Time* filled = nullptr) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (load.written() < 50 && absl::Now() < deadline) std::this_thread::yield();
    ASSERT_GE(load.written(), 50u) << "round " << round;
    if (filled != nullptr) *filled = absl::Now();
    fs().SetSpaceLeft(0);
    for (int i = 0; i < 1000 && store_->BackgroundError().ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(absl::IsResourceExhausted(store_->BackgroundError()))
        << "round " << round << ": " << store_->BackgroundError();
    EXPECT_EQ(store_->Apply(Claim("after-the-disk-filled", "worker-a")).status().code(),
              absl::StatusCode::kUnavailable);
  }
};

TEST_F(WalSyncFaultsTest, AppendsFailingBesideGroupSyncsFailClosedWithoutAborting) {
  constexpr int kRounds = 40;
  uint64_t written_in_all = 0;
  for (int round = 0; round < kRounds; ++round) {
    Close();
    made_ = FaultInjectionFileSystem::Make();
    ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync, /*group_sync=*/true));
    {
      Load load(store_.get());
      ASSERT_NO_FATAL_FAILURE(FillDiskUnder(load, round));
      written_in_all += load.written();
    }
    fs().SetSpaceLeft(FaultInjectionFileSystem::kUnlimited);
  }
  std::printf("[ disk faults ] %d full disks beside group syncs, %llu claims written\n", kRounds,
              static_cast<unsigned long long>(written_in_all));
}

// The same with writes that sync themselves (fsync without group sync,
// and the replication log's appends): a RocksDB write with `sync` set
// whose append fails while the replication log syncs the WAL beside it
// (ReplicationLog::SyncAppends, as a follower does). Such a write and such
// a sync must not run together (DataDir::WriteSynced): the sync would wait
// for the write and the failed write for the sync.
TEST_F(WalSyncFaultsTest, SyncedWritesFailingBesideLogSyncsFailClosedWithoutAborting) {
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    Close();
    made_ = FaultInjectionFileSystem::Make();
    ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync));
    absl::StatusOr<std::unique_ptr<ReplicationLog>> log = store_->OpenReplicationLog();
    ASSERT_TRUE(log.ok()) << log.status();
    {
      Load load(store_.get(), [&log] { (*log)->SyncAppends().IgnoreError(); });
      absl::Time filled;
      ASSERT_NO_FATAL_FAILURE(FillDiskUnder(load, round, &filled));
      EXPECT_LT(absl::Now() - filled, WalFence::kFailedWriteWait)
          << "round " << round << ": a failed write waited for a sync that waited for it";
    }
    log->reset();
    fs().SetSpaceLeft(FaultInjectionFileSystem::kUnlimited);
  }
}

// The disk fills up and space returns, again and again, on one store under
// fsync load, each time soon after the last recovery. A write that failed
// while the disk was full may reach RocksDB only after Recover() has
// returned, and leave a WAL writer in its error state again: the store must
// then neither abort nor sync that WAL, and a later Recover() must bring
// writes back. So each round waits a while for writes to resume by
// themselves; if they do not, it calls Recover() while storage reports the
// full disk, as the server's storage monitor does on every poll, until
// writes and syncs go through. Every claim acknowledged after a sync
// survives a power loss at the end.
TEST_F(WalSyncFaultsTest, RepeatedFullDisksUnderLoadRecoverEveryTime) {
  constexpr int kRounds = 40;
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync, /*group_sync=*/true));
  std::vector<std::pair<std::string, uint64_t>> acknowledged;
  int late_failures = 0;
  {
    Load load(store_.get());
    // Recovers as the storage monitor does until `key` is claimed, the load
    // has written `writes` more, and a sync has gone through after both.
    auto recover_until_synced = [&](const std::string& key, uint64_t writes) {
      const uint64_t before = load.written();
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      absl::StatusOr<OpResult> claimed = absl::UnavailableError("not yet claimed");
      absl::Status synced = absl::UnavailableError("not yet synced");
      while (absl::Now() < deadline) {
        if (absl::IsResourceExhausted(store_->BackgroundError())) store_->Recover().IgnoreError();
        if (!claimed.ok()) claimed = store_->Apply(Claim(key, "worker-a"));
        if (claimed.ok() && load.written() >= before + writes) {
          std::promise<absl::Status> done;
          store_->AfterSync([&done](absl::Status status) { done.set_value(std::move(status)); });
          synced = done.get_future().get();
          if (synced.ok()) break;
        }
        std::this_thread::yield();
      }
      ASSERT_TRUE(claimed.ok()) << key << ": " << claimed.status();
      ASSERT_TRUE(synced.ok()) << key << ": writes " << load.written() - before << ", " << synced
                               << ", storage " << store_->BackgroundError();
      ASSERT_EQ(claimed->outcome, Outcome::kAcquired) << key;
      acknowledged.emplace_back(key, claimed->record.token);
    };

    for (int round = 0; round < kRounds; ++round) {
      const uint64_t before = load.written();
      const absl::Time wait = absl::Now() + absl::Seconds(1);
      while (load.written() < before + 50 && absl::Now() < wait) std::this_thread::yield();
      if (load.written() < before + 50) {
        ++late_failures;
        ASSERT_NO_FATAL_FAILURE(recover_until_synced(absl::StrCat("round-", round), 50));
      }
      fs().SetSpaceLeft(0);
      for (int i = 0; i < 1000 && store_->BackgroundError().ok(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_TRUE(absl::IsResourceExhausted(store_->BackgroundError()))
          << "round " << round << ": " << store_->BackgroundError();
      fs().SetSpaceLeft(FaultInjectionFileSystem::kUnlimited);
      absl::Status recovered = store_->Recover();
      for (int attempt = 1; !recovered.ok() && attempt < 20; ++attempt) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        recovered = store_->Recover();
      }
      ASSERT_TRUE(recovered.ok()) << "round " << round << ": " << recovered;
    }
    ASSERT_NO_FATAL_FAILURE(recover_until_synced("after-the-last-round", 50));
    std::printf(
        "[ disk faults ] %d full disks recovered under load (%d with a write failing late),"
        " %llu claims\n",
        kRounds, late_failures, static_cast<unsigned long long>(load.written()));
  }
  fs().PowerLoss();
  Close();
  fs().Restart();
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync, /*group_sync=*/true));
  for (const auto& [key, token] : acknowledged) {
    EXPECT_EQ(Do(Query(key)).record.token, token) << key;
  }
}

// A hot key: while a write of the key waits on a stalled disk, holding the
// key's stripe, calls that write nothing on it (a duplicate claim, a query,
// a batch of them) are answered from what is stored, without waiting for
// their turn. What they answer is the state before the stalled write, which
// is not acknowledged yet.
TEST_F(StoreDiskFaultsTest, StalledWriteOfAKeyDoesNotHoldUpCallsThatWriteNothingOnIt) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kBuffered));
  const uint64_t held = Acquire("order-1", "worker-a");
  const uint64_t done = Acquire("order-2", "worker-a");
  ASSERT_EQ(Do(Complete("order-2", done, "receipt")).outcome, Outcome::kOk);

  fs().HoldAppends();
  std::future<absl::StatusOr<OpResult>> extend = std::async(
      std::launch::async, [&] { return store_->Apply(Extend("order-1", held, 2 * kLeaseMs)); });
  // Declared after the futures, so it runs first: their threads can end.
  absl::Cleanup release_disk = [this] { fs().ReleaseAppends(); };
  ASSERT_TRUE(fs().AwaitHeldAppend(absl::Seconds(10))) << "the extension never reached the disk";

  std::future<absl::StatusOr<OpResult>> duplicate =
      std::async(std::launch::async, [&] { return store_->Apply(Claim("order-1", "worker-b")); });
  ASSERT_EQ(duplicate.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a duplicate claim waited for the stalled write of its key";
  absl::StatusOr<OpResult> answer = duplicate.get();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->outcome, Outcome::kInProgress);
  EXPECT_EQ(answer->record.owner, "worker-a");
  EXPECT_EQ(answer->record.token, held);

  std::future<std::vector<absl::StatusOr<OpResult>>> batch = std::async(std::launch::async, [&] {
    const std::vector<Operation> ops = {Query("order-1"), Claim("order-2", "worker-b"),
                                        Claim("order-1", "worker-c")};
    return store_->Apply(ops);
  });
  ASSERT_EQ(batch.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a batch that writes nothing waited for the stalled write of one of its keys";
  std::vector<absl::StatusOr<OpResult>> answers = batch.get();
  ASSERT_EQ(answers.size(), 3u);
  for (const auto& a : answers) ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(answers[0]->record.state, State::kInProgress);
  EXPECT_EQ(answers[0]->record.lease_expires_ms, kStartMs + kLeaseMs)
      << "a read answered with the stalled extension before it was acknowledged";
  EXPECT_EQ(answers[1]->outcome, Outcome::kCompleted);
  EXPECT_EQ(answers[1]->record.result, "receipt");
  EXPECT_EQ(answers[2]->outcome, Outcome::kInProgress);

  std::move(release_disk).Invoke();
  absl::StatusOr<OpResult> extended = extend.get();
  ASSERT_TRUE(extended.ok()) << extended.status();
  EXPECT_EQ(extended->outcome, Outcome::kOk);
  EXPECT_EQ(Do(Query("order-1")).record.lease_expires_ms, kStartMs + 2 * kLeaseMs);
}

}  // namespace
}  // namespace dedup::storage
