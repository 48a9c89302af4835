#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Concurrency: threads claiming the same keys, one by one or in overlapping
// batches, never both acquire a key and never deadlock.
namespace dedup::storage {
namespace {

TEST_F(StoreTest, ConcurrentClaimsAcquireEachKeyExactlyOnce) {
  constexpr int kThreads = 8;
  constexpr int kKeys = 500;
  struct Answer {
    bool ok = false;
    Outcome outcome = Outcome::kAbsent;
    std::string owner;
    uint64_t token = 0;
  };
  // answers[thread][key]
  std::vector<std::vector<Answer>> answers(kThreads, std::vector<Answer>(kKeys));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, &answers] {
      const std::string owner = "worker-" + std::to_string(t);
      for (int i = 0; i < kKeys; ++i) {
        const int k = (i + t * 61) % kKeys;  // Each thread in its own order.
        absl::StatusOr<OpResult> r = store_->Apply(Claim("order-" + std::to_string(k), owner));
        Answer& answer = answers[t][k];
        answer.ok = r.ok();
        if (!r.ok()) continue;
        answer.outcome = r->outcome;
        answer.owner = r->record.owner;
        answer.token = r->record.token;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  for (int k = 0; k < kKeys; ++k) {
    int acquired = 0;
    std::string winner;
    uint64_t winning_token = 0;
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_TRUE(answers[t][k].ok) << "thread " << t << " key " << k;
      if (answers[t][k].outcome == Outcome::kAcquired) {
        ++acquired;
        winner = answers[t][k].owner;
        winning_token = answers[t][k].token;
      }
    }
    ASSERT_EQ(acquired, 1) << "key order-" << k;
    for (int t = 0; t < kThreads; ++t) {
      if (answers[t][k].outcome == Outcome::kAcquired) continue;
      EXPECT_EQ(answers[t][k].outcome, Outcome::kInProgress);
      EXPECT_EQ(answers[t][k].owner, winner);
      EXPECT_EQ(answers[t][k].token, winning_token);
    }
    EXPECT_EQ(Do(Query("order-" + std::to_string(k))).record.owner, winner);
  }
}

TEST_F(StoreTest, ConcurrentOverlappingBatchesNeitherDeadlockNorDoubleAcquire) {
  constexpr int kThreads = 4;
  constexpr int kKeys = 64;
  std::vector<std::map<int, int>> acquired(kThreads);  // key -> count
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, &acquired, &failures] {
      const std::string owner = "worker-" + std::to_string(t);
      for (int round = 0; round < 16; ++round) {
        // Overlapping key sets in different orders, with repeats.
        std::vector<Operation> ops;
        std::vector<int> keys;
        for (int j = 0; j < 12; ++j) {
          const int k = (t % 2 == 0) ? (round * 5 + j * 7) % kKeys
                                     : (kKeys - 1 - (round * 5 + j * 3) % kKeys);
          keys.push_back(k);
          ops.push_back(Claim("order-" + std::to_string(k), "x" + owner));
        }
        const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);
        for (size_t j = 0; j < results.size(); ++j) {
          if (!results[j].ok()) {
            ++failures[t];
          } else if (results[j]->outcome == Outcome::kAcquired &&
                     results[j]->record.owner == "x" + owner) {
            acquired[t][keys[j]] = 1;  // Repeats are re-entrant, count once.
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::map<int, int> winners;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    for (const auto& [key, count] : acquired[t]) winners[key] += count;
  }
  for (const auto& [key, count] : winners) {
    EXPECT_EQ(count, 1) << "key order-" << key << " acquired by several owners";
  }
  EXPECT_FALSE(winners.empty());
}

}  // namespace
}  // namespace dedup::storage
