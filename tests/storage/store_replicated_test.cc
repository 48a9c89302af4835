#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"
#include "storage/operation.h"
#include "storage/replication_log.h"
#include "storage/shard_replicator.h"
#include "storage/store.h"
#include "storage/stripe_locks.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// A replicated store's write path without a cluster (store.h,
// TryApplyAsync): the writes a call decides wait for their commit, which
// another thread learns of, holding their keys until then.
namespace dedup::storage {
namespace {

// A leader whose followers acknowledge only when the test says so: it
// appends each write to the store's own log at once and, on Acknowledge,
// applies the oldest call's writes to the records and answers it.
class HeldReplicator : public ShardReplicator {
 public:
  explicit HeldReplicator(ReplicationLog* log) : log_(log) {}

  absl::Status CheckLeading(uint32_t) override { return absl::OkStatus(); }
  absl::StatusOr<uint64_t> NextToken(uint32_t) override { return ++tokens_; }

  void CommitAsync(std::vector<ShardWrite> writes, CommitDone done) override {
    std::vector<ReplicationLog::ShardAppend> appends;
    for (ShardWrite& write : writes) appends.push_back({write.shard, 1, std::move(write.batch)});
    absl::StatusOr<std::vector<LogPosition>> appended = log_->AppendAll(appends);
    ASSERT_TRUE(appended.ok()) << appended.status();
    Call call;
    for (size_t i = 0; i < appends.size(); ++i) {
      call.entries.push_back({appends[i].shard, (*appended)[i].seq});
    }
    call.done = std::move(done);
    absl::MutexLock lock(&mu_);
    calls_.push_back(std::move(call));
  }

  size_t waiting() {
    absl::MutexLock lock(&mu_);
    return calls_.size();
  }

  // Answers the oldest waiting call: with OK for each write once applied,
  // or with `refusal` for every write, applying nothing.
  void Acknowledge(const absl::Status& refusal = absl::OkStatus()) {
    Call call;
    {
      absl::MutexLock lock(&mu_);
      ASSERT_FALSE(calls_.empty());
      call = std::move(calls_.front());
      calls_.pop_front();
    }
    std::vector<absl::Status> statuses(call.entries.size(), refusal);
    if (refusal.ok()) {
      std::vector<ReplicationLog::ShardApply> applies;
      for (const auto& [shard, seq] : call.entries) applies.push_back({shard, seq, {}});
      statuses = log_->ApplyAll(applies);
    }
    std::move(call.done)(std::move(statuses));
  }

 private:
  struct Call {
    std::vector<std::pair<uint32_t, uint64_t>> entries;  // Shard, seq.
    CommitDone done;
  };
  ReplicationLog* const log_;
  std::atomic<uint64_t> tokens_{0};
  absl::Mutex mu_;
  std::deque<Call> calls_ ABSL_GUARDED_BY(mu_);
};

// The answers of one TryApplyAsync, once they come.
struct Answers {
  absl::Notification came;
  std::vector<absl::StatusOr<OpResult>> results;

  Store::ApplyDone Done() {
    return [this](std::vector<absl::StatusOr<OpResult>> answered) {
      results = std::move(answered);
      came.Notify();
    };
  }
};

class ReplicatedStoreTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    absl::StatusOr<std::unique_ptr<ReplicationLog>> log = store_->OpenReplicationLog();
    ASSERT_TRUE(log.ok()) << log.status();
    log_ = *std::move(log);
    replicator_ = std::make_unique<HeldReplicator>(log_.get());
    store_->SetReplicator(replicator_.get());
  }

  void TearDown() override {
    // Nothing may be left waiting: its answer would outlive the test.
    EXPECT_EQ(replicator_->waiting(), 0u);
    log_.reset();
    Close();
  }

  std::unique_ptr<ReplicationLog> log_;
  std::unique_ptr<HeldReplicator> replicator_;
};

TEST_F(ReplicatedStoreTest, AClaimIsAnsweredOnceCommittedAndHoldsItsKeyUntilThen) {
  Answers first;
  const ClaimOp claim = Claim("order-1", "worker-a");
  ASSERT_TRUE(store_->TryApplyAsync({Operation(claim)}, SIZE_MAX, first.Done()));
  EXPECT_FALSE(first.came.HasBeenNotified()) << "answered before its commit";
  EXPECT_EQ(replicator_->waiting(), 1u);

  // The same key again: its stripe is held by the write waiting for its
  // commit, so the call is refused without waiting (and runs nothing).
  Answers refused;
  EXPECT_FALSE(
      store_->TryApplyAsync({Operation(Claim("order-1", "worker-b"))}, SIZE_MAX, refused.Done()));
  EXPECT_FALSE(refused.came.HasBeenNotified());
  EXPECT_EQ(replicator_->waiting(), 1u);

  replicator_->Acknowledge();
  ASSERT_TRUE(first.came.HasBeenNotified());
  ASSERT_EQ(first.results.size(), 1u);
  ASSERT_TRUE(first.results[0].ok()) << first.results[0].status();
  EXPECT_EQ(first.results[0]->outcome, Outcome::kAcquired);

  // Committed and applied: another owner finds the key held, a duplicate
  // answered at once from the records, with nothing to commit.
  Answers duplicate;
  ASSERT_TRUE(
      store_->TryApplyAsync({Operation(Claim("order-1", "worker-b"))}, SIZE_MAX, duplicate.Done()));
  ASSERT_TRUE(duplicate.came.HasBeenNotified());
  ASSERT_TRUE(duplicate.results[0].ok()) << duplicate.results[0].status();
  EXPECT_EQ(duplicate.results[0]->outcome, Outcome::kInProgress);
  EXPECT_EQ(duplicate.results[0]->record.owner, "worker-a");
  EXPECT_EQ(replicator_->waiting(), 0u);
}

// A key whose stripe comes before `held`'s: stripes are taken in
// ascending order.
std::string KeyTakenBefore(const std::string& held) {
  const size_t held_stripe = StripeLocks::StripeOf(KeyHash(kNs, held));
  for (int i = 0;; ++i) {
    std::string key = "order-" + std::to_string(i);
    if (StripeLocks::StripeOf(KeyHash(kNs, key)) < held_stripe) return key;
  }
}

TEST_F(ReplicatedStoreTest, ACallWithOneHeldKeyTakesNoneOfItsKeys) {
  const std::string held = "order-held";
  const std::string free = KeyTakenBefore(held);
  Answers first;
  ASSERT_TRUE(store_->TryApplyAsync({Operation(Claim(held, "worker-a"))}, SIZE_MAX, first.Done()));
  Answers refused;
  EXPECT_FALSE(store_->TryApplyAsync(
      {Operation(Claim(free, "worker-b")), Operation(Claim(held, "worker-b"))}, SIZE_MAX,
      refused.Done()));
  // The free key's stripe, taken before the held one's was found held,
  // was given back.
  Answers other;
  ASSERT_TRUE(store_->TryApplyAsync({Operation(Claim(free, "worker-c"))}, SIZE_MAX, other.Done()));
  EXPECT_EQ(replicator_->waiting(), 2u);
  replicator_->Acknowledge();
  replicator_->Acknowledge();
  ASSERT_TRUE(other.came.HasBeenNotified());
  ASSERT_TRUE(other.results[0].ok()) << other.results[0].status();
  EXPECT_EQ(other.results[0]->outcome, Outcome::kAcquired);
  EXPECT_FALSE(refused.came.HasBeenNotified());
}

TEST_F(ReplicatedStoreTest, AWaitingApplyOfTheSameKeyRunsOnceAnotherThreadSeesTheCommit) {
  Answers first;
  ASSERT_TRUE(
      store_->TryApplyAsync({Operation(Claim("order-1", "worker-a"))}, SIZE_MAX, first.Done()));
  // A worker's Apply of the key waits for the stripe, which the thread
  // that sees the commit gives back (a stripe is not a mutex of the
  // thread that took it).
  std::optional<absl::StatusOr<OpResult>> second;
  std::thread worker([&] { second = store_->Apply(Claim("order-1", "worker-b")); });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(replicator_->waiting(), 1u) << "the second claim decided before the first committed";
  std::thread acknowledger([&] { replicator_->Acknowledge(); });
  acknowledger.join();
  // Only if the second claim wrote too (decided beside the first): it is
  // answered, so that the worker ends and the test fails above, not hangs.
  while (replicator_->waiting() > 0) replicator_->Acknowledge();
  worker.join();
  ASSERT_TRUE(first.came.HasBeenNotified());
  ASSERT_TRUE(second.has_value());
  ASSERT_TRUE(second->ok()) << second->status();
  EXPECT_EQ((*second)->outcome, Outcome::kInProgress);
  EXPECT_EQ((*second)->record.owner, "worker-a");
}

TEST_F(ReplicatedStoreTest, ACommitThatFailsAnswersItsOperationsWithItsStatusAndWritesNothing) {
  Answers failed;
  ASSERT_TRUE(store_->TryApplyAsync(
      {Operation(Claim("order-1", "worker-a")), Operation(Claim("order-2", "worker-a"))}, SIZE_MAX,
      failed.Done()));
  replicator_->Acknowledge(absl::UnavailableError("not acknowledged by a majority in time"));
  ASSERT_TRUE(failed.came.HasBeenNotified());
  ASSERT_EQ(failed.results.size(), 2u);
  for (const absl::StatusOr<OpResult>& result : failed.results) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  }
  // Both keys are free again, and nothing of the failed call was applied.
  Answers again;
  ASSERT_TRUE(
      store_->TryApplyAsync({Operation(Claim("order-1", "worker-b"))}, SIZE_MAX, again.Done()));
  replicator_->Acknowledge();
  ASSERT_TRUE(again.came.HasBeenNotified());
  ASSERT_TRUE(again.results[0].ok()) << again.results[0].status();
  EXPECT_EQ(again.results[0]->outcome, Outcome::kAcquired);
  EXPECT_EQ(again.results[0]->record.owner, "worker-b");
}

}  // namespace
}  // namespace dedup::storage
