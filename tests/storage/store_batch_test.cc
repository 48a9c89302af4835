#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Batches: Apply of several operations answers each in order, and later
// operations on a key see the earlier ones.
namespace dedup::storage {
namespace {

TEST_F(StoreTest, BatchAnswersEachOperationInOrder) {
  const uint64_t held = Acquire("held", "worker-z");
  const std::vector<Operation> ops = {
      Claim("a", "worker-a"), Query("nothing"),       Claim("held", "worker-b"),
      Complete("nothing", 1), Claim("b", "worker-b"), Release("held", held + 1000),
  };
  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);

  ASSERT_EQ(results.size(), ops.size());
  const std::vector<Outcome> expected = {
      Outcome::kAcquired, Outcome::kAbsent,   Outcome::kInProgress,
      Outcome::kNotFound, Outcome::kAcquired, Outcome::kStaleToken,
  };
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->outcome, expected[i]) << "position " << i;
  }
  EXPECT_EQ(results[0]->record.key, "a");
  EXPECT_EQ(results[4]->record.key, "b");
  EXPECT_EQ(results[2]->record.owner, "worker-z");
}

TEST_F(StoreTest, BatchOperationsOnSameKeySeeEarlierOnes) {
  const std::vector<Operation> ops = {
      Claim("order-1", "worker-a"),
      Claim("order-1", "worker-a"),  // Re-entrant: the claim above is visible.
      Claim("order-1", "worker-b"),
  };
  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(results[0]->outcome, Outcome::kAcquired);
  EXPECT_EQ(results[1]->outcome, Outcome::kAcquired);
  EXPECT_EQ(results[1]->record.token, results[0]->record.token);
  EXPECT_EQ(results[2]->outcome, Outcome::kInProgress);
  EXPECT_EQ(results[2]->record.owner, "worker-a");
}

TEST_F(StoreTest, BatchOperationsOnSameKeySeeEarlierOnesAmongOtherKeys) {
  // Repeated keys apart from each other, first and last in the batch.
  const std::vector<Operation> ops = {
      Claim("order-1", "worker-a"), Claim("order-2", "worker-b"), Claim("order-1", "worker-b"),
      Claim("order-3", "worker-c"), Claim("order-2", "worker-c"), Claim("order-1", "worker-a"),
  };
  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);
  ASSERT_EQ(results.size(), ops.size());
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<Outcome> expected = {
      Outcome::kAcquired, Outcome::kAcquired,   Outcome::kInProgress,
      Outcome::kAcquired, Outcome::kInProgress, Outcome::kAcquired,
  };
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i]->outcome, expected[i]) << "position " << i;
  }
  EXPECT_EQ(results[2]->record.owner, "worker-a");
  EXPECT_EQ(results[4]->record.owner, "worker-b");
  EXPECT_EQ(results[5]->record.token, results[0]->record.token);
}

TEST_F(StoreTest, ClaimThenCompleteInOneBatchAcquiresThenCompletes) {
  // The claim's token is not known before the batch runs, but tokens come
  // from a per-shard counter: a probe in the same shard tells the next one.
  const uint32_t shard = ShardOf(kNs, "probe", store_->shard_count());
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    const std::string candidate = "order-" + std::to_string(i);
    if (ShardOf(kNs, candidate, store_->shard_count()) == shard) key = candidate;
  }
  const uint64_t next = Acquire("probe", "worker-p") + 1;

  const std::vector<Operation> ops = {
      Claim(key, "worker-a"),
      Complete(key, next, "receipt"),
      Claim(key, "worker-b"),
  };
  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& result : results) ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(results[0]->outcome, Outcome::kAcquired);
  ASSERT_EQ(results[0]->record.token, next);
  EXPECT_EQ(results[1]->outcome, Outcome::kOk);
  EXPECT_EQ(results[2]->outcome, Outcome::kCompleted);
  EXPECT_EQ(results[2]->record.result, "receipt");

  // And the batch's final state is what was persisted.
  Close();
  ASSERT_NO_FATAL_FAILURE(Open(Options()));
  const OpResult q = Do(Query(key));
  EXPECT_EQ(q.record.state, State::kCompleted);
  EXPECT_EQ(q.record.result, "receipt");
}

TEST_F(StoreTest, EmptyBatchAnswersNothing) {
  EXPECT_TRUE(store_->Apply(absl::Span<const Operation>()).empty());
}

}  // namespace
}  // namespace dedup::storage

namespace dedup::storage {
namespace {

// A 30 KiB request of 1,000 reads must not make the store hold 64 MiB of
// answers: reads past the answer budget are refused one by one.
TEST_F(StoreTest, ReadsPastTheAnswerBudgetAreRefusedAndWritesStillAnswer) {
  const std::string result(1000, 'r');
  ASSERT_EQ(Do(Complete("done", Acquire("done", "worker-a"), result)).outcome, Outcome::kOk);
  std::vector<Operation> ops;
  for (int i = 0; i < 5; ++i) ops.push_back(Query("done"));
  ops.push_back(Claim("fresh", "worker-b"));
  ops.push_back(Query("done"));

  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops, 2500);

  ASSERT_EQ(results.size(), ops.size());
  ASSERT_TRUE(results[0].ok());
  EXPECT_EQ(results[0]->record.result, result);
  ASSERT_TRUE(results[1].ok()) << "two answers of about 1 KiB fit in 2,500 bytes";
  for (size_t i : {2, 3, 4, 6}) {
    EXPECT_EQ(results[i].status().code(), absl::StatusCode::kResourceExhausted) << "item " << i;
  }
  ASSERT_TRUE(results[5].ok()) << results[5].status();
  EXPECT_EQ(results[5]->outcome, Outcome::kAcquired) << "a write is applied and answered";
}

TEST_F(StoreTest, TheFirstAnswerFitsWhateverTheBudget) {
  ASSERT_EQ(Do(Complete("done", Acquire("done", "worker-a"), std::string(1000, 'r'))).outcome,
            Outcome::kOk);
  const std::vector<Operation> ops = {Query("done")};

  const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops, 10);

  ASSERT_TRUE(results[0].ok()) << results[0].status();
  EXPECT_EQ(results[0]->record.result.size(), 1000u);
}

}  // namespace
}  // namespace dedup::storage
