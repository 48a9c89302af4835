#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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

// A hot key: readers claim it as duplicates, alone and in read-only
// batches, while its holder keeps extending the lease, so that the readers
// often find its stripe busy and answer from reads without the locks. Every
// answer reflects each extension acknowledged before the call began, and
// never one that was not made; the holder and its token never change.
TEST_F(StoreTest, ConcurrentDuplicatesOfAKeyBeingWrittenSeeEveryAcknowledgedWrite) {
  StoreOptions options = Options();
  options.durability = Durability::kBuffered;
  ASSERT_NO_FATAL_FAILURE(Open(options));
  const uint64_t token = Acquire("hot", "worker-a");
  constexpr int kExtensions = 2000;
  constexpr int kReaders = 4;
  std::atomic<int> acknowledged{0};  // Extensions acknowledged so far.
  std::atomic<bool> writing{true};
  std::string writer_error;
  std::thread writer([&] {
    for (int i = 1; i <= kExtensions; ++i) {
      absl::StatusOr<OpResult> r = store_->Apply(Extend("hot", token, kLeaseMs + i));
      if (!r.ok() || r->outcome != Outcome::kOk) {
        writer_error = r.ok() ? "extension not OK" : r.status().ToString();
        break;
      }
      acknowledged.store(i);
    }
    writing.store(false);
  });
  std::vector<std::string> errors(kReaders);
  std::vector<int> answers(kReaders, 0);
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&, t] {
      for (int n = 0; writing.load() && errors[t].empty(); ++n) {
        const int seen = acknowledged.load();
        std::vector<Operation> ops = {Claim("hot", "worker-b")};
        if (n % 2 == 1) ops.push_back(Query("hot"));
        const std::vector<absl::StatusOr<OpResult>> results = store_->Apply(ops);
        for (const absl::StatusOr<OpResult>& r : results) {
          const int64_t lowest = kStartMs + kLeaseMs + seen;
          if (!r.ok()) {
            errors[t] = r.status().ToString();
          } else if (r->record.state != State::kInProgress || r->record.owner != "worker-a" ||
                     r->record.token != token) {
            errors[t] = "the holder or its token changed";
          } else if (r->record.lease_expires_ms < lowest) {
            errors[t] =
                absl::StrCat("lease ends at ", r->record.lease_expires_ms, " after extension ",
                             seen, " was acknowledged (at least ", lowest, ")");
          } else if (r->record.lease_expires_ms > kStartMs + kLeaseMs + kExtensions) {
            errors[t] = "a lease no extension gave";
          }
        }
        ++answers[t];
      }
    });
  }
  writer.join();
  for (std::thread& reader : readers) reader.join();

  EXPECT_EQ(writer_error, "");
  for (int t = 0; t < kReaders; ++t) {
    EXPECT_EQ(errors[t], "") << "reader " << t;
    EXPECT_GT(answers[t], 0) << "reader " << t;
  }
  EXPECT_GT(store_->answered_without_locks(), 0u)
      << "no reader found the stripe busy: the unlocked reads went untested";
  EXPECT_EQ(Do(Query("hot")).record.lease_expires_ms, kStartMs + kLeaseMs + kExtensions);
}

}  // namespace
}  // namespace dedup::storage
