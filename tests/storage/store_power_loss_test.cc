#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "storage/testing/rocksdb_env.h"
#include "tests/common/fault_injection_file_system.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Power loss (design.md §5, README "Reliability"): writers claim and complete
// fresh keys from several threads while the machine loses power; the fault
// file system drops every write that was not synced, and the store reopens.
// An oracle of the acknowledged answers then checks what survived:
//   - fsync: every acknowledged Claim and Complete is present;
//   - buffered: only answers acknowledged after the last WAL sync began may
//     be missing;
//   - both: a lost claim's key, claimed again, gets a larger token.
//
// DEDUP_FAULT_ROLLBACK=unsynced_fsync runs the fsync test against a broken
// store that acknowledges writes before syncing them; it must then fail.
namespace dedup::storage {
namespace {

using test::FaultInjectionFileSystem;
using SteadyTime = std::chrono::steady_clock::time_point;

constexpr int kWriters = 4;
constexpr int kAckTarget = 600;  // Acknowledged answers before the power goes.

// What the writers were told about one key.
struct Acked {
  uint64_t token = 0;
  bool completed = false;
  SteadyTime last_ack;  // Of the Claim, or of the Complete when there is one.
};

// What the reopened store still knows of the acknowledged answers.
struct Survey {
  size_t claims = 0;  // Acknowledged.
  size_t completes = 0;
  size_t lost_claims = 0;  // Acknowledged, and gone after the power loss.
  size_t lost_completes = 0;
  size_t wrong_token = 0;      // Present, with another token.
  size_t token_went_down = 0;  // A lost key claimed again got no larger token.
  std::optional<SteadyTime> earliest_lost_ack;
};

bool RollbackRequested() {
  const char* rollback = std::getenv("DEDUP_FAULT_ROLLBACK");
  return rollback != nullptr && std::string(rollback) == "unsynced_fsync";
}

class StorePowerLossTest : public StoreTest {
 protected:
  // The store closes before the file system it runs on goes.
  void TearDown() override { Close(); }

  // Opens a store of `durability` on the fault file system.
  void OpenOnFaults(Durability durability, bool unsynced_fsync, uint64_t token_block = 32,
                    bool group_sync = false) {
    options_ = Options();
    options_.durability = durability;
    options_.group_sync = group_sync;
    options_.buffered_sync_interval_ms = 50;
    // Small blocks: ceilings are persisted during the run too.
    options_.token_block = token_block;
    SetRocksDbEnvForTesting(&options_, env_, unsynced_fsync);
    ASSERT_NO_FATAL_FAILURE(Open(options_));
  }

  // Writers claim and complete fresh keys until kAckTarget answers are
  // acknowledged; then the power goes while they keep writing. Returns
  // every acknowledged answer by key.
  std::map<std::string, Acked> WriteUntilPowerLoss() {
    std::atomic<int> acks{0};
    std::vector<std::map<std::string, Acked>> per_writer(kWriters);
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        for (int i = 0;; ++i) {
          const std::string key = absl::StrCat("w", w, "-", i);
          absl::StatusOr<OpResult> claimed = store_->Apply(Claim(key, "writer"));
          if (!claimed.ok() || !Synced()) return;  // The power is gone.
          if (claimed->outcome != Outcome::kAcquired) continue;
          Acked& acked = per_writer[w][key];
          acked.token = claimed->record.token;
          acked.last_ack = std::chrono::steady_clock::now();
          ++acks;
          absl::StatusOr<OpResult> done = store_->Apply(Complete(key, acked.token));
          if (!done.ok() || !Synced()) return;
          if (done->outcome != Outcome::kOk) continue;
          acked.completed = true;
          acked.last_ack = std::chrono::steady_clock::now();
          ++acks;
        }
      });
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (acks.load() < kAckTarget && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    power_lost_at_ = std::chrono::steady_clock::now();
    fs_->PowerLoss();
    for (std::thread& writer : writers) writer.join();
    Close();
    fs_->Restart();

    std::map<std::string, Acked> all;
    for (const auto& acked : per_writer) all.insert(acked.begin(), acked.end());
    return all;
  }

  // What a server does before it acknowledges an answer: waits for
  // Store::AfterSync (at once unless the store syncs in groups). False when
  // the sync failed.
  bool Synced() {
    std::promise<absl::Status> synced;
    store_->AfterSync([&synced](absl::Status status) { synced.set_value(std::move(status)); });
    return synced.get_future().get().ok();
  }

  // Reopens the store and compares it with the acknowledged answers.
  Survey SurveyAfterRestart(const std::map<std::string, Acked>& acked) {
    Survey survey;
    Open(options_);
    if (store_ == nullptr) return survey;
    for (const auto& [key, answer] : acked) {
      ++survey.claims;
      if (answer.completed) ++survey.completes;
      const OpResult found = Do(Query(key));
      const bool present = found.outcome == Outcome::kFound;
      const bool complete = present && found.record.state == State::kCompleted;
      if (present && found.record.token != answer.token) ++survey.wrong_token;
      if (present && !(answer.completed && !complete)) continue;
      if (!present) ++survey.lost_claims;
      if (answer.completed) ++survey.lost_completes;
      if (!survey.earliest_lost_ack || answer.last_ack < *survey.earliest_lost_ack) {
        survey.earliest_lost_ack = answer.last_ack;
      }
      if (!present) {
        const OpResult again = Do(Claim(key, "after-restart"));
        if (again.outcome != Outcome::kAcquired || again.record.token <= answer.token) {
          ++survey.token_went_down;
        }
      }
    }
    return survey;
  }

  // The fsync oracle: on a store of fsync durability (broken, with
  // DEDUP_FAULT_ROLLBACK=unsynced_fsync), every acknowledged answer
  // survives the power loss with its token.
  void ExpectEveryAcknowledgedAnswerKept(const std::string& mode, uint64_t token_block,
                                         bool group_sync) {
    ASSERT_NO_FATAL_FAILURE(
        OpenOnFaults(Durability::kFsync, RollbackRequested(), token_block, group_sync));
    const std::map<std::string, Acked> acked = WriteUntilPowerLoss();
    const Survey survey = SurveyAfterRestart(acked);
    Print((RollbackRequested() ? mode + " (broken: unsynced_fsync)" : mode).c_str(), survey);

    EXPECT_GE(survey.claims + survey.completes, static_cast<size_t>(kAckTarget));
    EXPECT_EQ(survey.lost_claims, 0u);
    EXPECT_EQ(survey.lost_completes, 0u);
    EXPECT_EQ(survey.wrong_token, 0u);
    EXPECT_EQ(survey.token_went_down, 0u);
  }

  static void Print(const char* mode, const Survey& s) {
    std::printf(
        "[ power loss ] %s: %zu claims and %zu completes acknowledged; lost after power loss: "
        "%zu claims, %zu completes; tokens gone down: %zu\n",
        mode, s.claims, s.completes, s.lost_claims, s.lost_completes, s.token_went_down);
  }

  std::pair<std::shared_ptr<FaultInjectionFileSystem>, std::shared_ptr<rocksdb::Env>> made_ =
      FaultInjectionFileSystem::Make();
  std::shared_ptr<FaultInjectionFileSystem> fs_ = made_.first;
  std::shared_ptr<rocksdb::Env> env_ = made_.second;
  StoreOptions options_;
  SteadyTime power_lost_at_;
};

TEST_F(StorePowerLossTest, FsyncModeKeepsEveryAcknowledgedClaimAndComplete) {
  ExpectEveryAcknowledgedAnswerKept("fsync", /*token_block=*/32, /*group_sync=*/false);
}

TEST_F(StorePowerLossTest, BufferedModeLosesAtMostTheLastSyncInterval) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kBuffered, false));
  const std::map<std::string, Acked> acked = WriteUntilPowerLoss();
  const std::optional<SteadyTime> last_sync = fs_->LastWalSyncStart();
  const Survey survey = SurveyAfterRestart(acked);
  Print("buffered", survey);

  ASSERT_TRUE(last_sync.has_value());
  std::printf("[ power loss ] buffered: last WAL sync began %lld ms before the power loss\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(power_lost_at_ - *last_sync)
                      .count()));
  EXPECT_GE(survey.claims + survey.completes, static_cast<size_t>(kAckTarget));
  // What the last sync covered survived: anything lost was acknowledged
  // after it began, that is within the last sync interval.
  if (survey.earliest_lost_ack) {
    EXPECT_GE(*survey.earliest_lost_ack, *last_sync);
  }
  EXPECT_EQ(survey.wrong_token, 0u);
  EXPECT_EQ(survey.token_went_down, 0u);
}

// Group sync (StoreOptions::group_sync, what `execution: "inline"` uses
// with fsync): writes are not synced one by one, and an answer is
// acknowledged only once AfterSync says the store's next sync covered it.
TEST_F(StorePowerLossTest, FsyncGroupSyncKeepsEveryAcknowledgedClaimAndComplete) {
  // One token block per shard: no ceiling write syncs the WAL for it.
  ExpectEveryAcknowledgedAnswerKept("fsync group sync", /*token_block=*/1 << 16,
                                    /*group_sync=*/true);
}

// With group sync a record is readable before it is synced. An answer
// that only read it (a duplicate's, here a Query) waits for the sync too,
// so what it reported survives a power loss; without that wait it would
// not, since nothing else synced the WAL.
TEST_F(StorePowerLossTest, GroupSyncAnswersThatOnlyReadWaitForTheSyncOfWhatTheyRead) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync, /*unsynced_fsync=*/false,
                                       /*token_block=*/1 << 16, /*group_sync=*/true));
  const OpResult claimed = Do(Claim("read-before-sync", "first"));
  ASSERT_EQ(claimed.outcome, Outcome::kAcquired);
  const OpResult seen = Do(Query("read-before-sync"));
  ASSERT_EQ(seen.outcome, Outcome::kFound);
  ASSERT_TRUE(Synced());
  fs_->PowerLoss();
  Close();
  fs_->Restart();
  Open(options_);
  ASSERT_NE(store_, nullptr);
  const OpResult after = Do(Query("read-before-sync"));
  EXPECT_EQ(after.outcome, Outcome::kFound) << "an answer reported a record that power loss took";
  EXPECT_EQ(after.record.token, claimed.record.token);
}

// Without waiting, a write of group sync is not yet durable: the power
// loss takes it. This is what the waits above are for.
TEST_F(StorePowerLossTest, GroupSyncWritesNotWaitedForAreNotYetDurable) {
  ASSERT_NO_FATAL_FAILURE(OpenOnFaults(Durability::kFsync, /*unsynced_fsync=*/false,
                                       /*token_block=*/1 << 16, /*group_sync=*/true));
  ASSERT_EQ(Do(Claim("never-synced", "first")).outcome, Outcome::kAcquired);
  fs_->PowerLoss();
  Close();
  fs_->Restart();
  Open(options_);
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(Do(Query("never-synced")).outcome, Outcome::kAbsent);
}

// The oracle can see a loss: the same run against a store that acknowledges
// fsync-mode writes before syncing them loses acknowledged answers. With
// one token block per shard, no ceiling write syncs the WAL along the way.
TEST_F(StorePowerLossTest, UnsyncedFsyncModeIsCaughtLosingAcknowledgedWrites) {
  ASSERT_NO_FATAL_FAILURE(
      OpenOnFaults(Durability::kFsync, /*unsynced_fsync=*/true, /*token_block=*/1 << 16));
  const std::map<std::string, Acked> acked = WriteUntilPowerLoss();
  const Survey survey = SurveyAfterRestart(acked);
  Print("fsync (broken: unsynced_fsync)", survey);

  EXPECT_GT(survey.lost_claims + survey.lost_completes, 0u);
  EXPECT_EQ(survey.token_went_down, 0u);
}

}  // namespace
}  // namespace dedup::storage
