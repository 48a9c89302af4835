#include "storage/token_allocator.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace dedup::storage {
namespace {

// Stands in for the metadata write: remembers every ceiling it was asked to
// persist and can be made to fail.
struct FakeCeilingStore {
  std::vector<uint64_t> persisted;
  bool fail = false;

  TokenAllocator::PersistCeiling Callback() {
    return [this](uint64_t ceiling) {
      if (fail) return absl::UnavailableError("disk full");
      persisted.push_back(ceiling);
      return absl::OkStatus();
    };
  }
  uint64_t last() const { return persisted.empty() ? 0 : persisted.back(); }
};

uint64_t MustNext(TokenAllocator& tokens) {
  absl::StatusOr<uint64_t> token = tokens.Next();
  EXPECT_TRUE(token.ok()) << token.status();
  return token.ok() ? *token : 0;
}

TEST(TokenAllocatorTest, NewShardHandsOutPositiveStrictlyIncreasingTokens) {
  FakeCeilingStore store;
  TokenAllocator tokens(0, 3, store.Callback());
  uint64_t previous = 0;
  for (int i = 0; i < 20; ++i) {
    const uint64_t token = MustNext(tokens);
    EXPECT_GT(token, previous);
    previous = token;
  }
}

TEST(TokenAllocatorTest, PersistsCeilingBeforeHandingOutTokenAtOrAboveIt) {
  FakeCeilingStore store;
  TokenAllocator tokens(0, 3, store.Callback());
  for (int i = 0; i < 10; ++i) {
    const size_t persists_before = store.persisted.size();
    const uint64_t ceiling_before = store.last();
    const uint64_t token = MustNext(tokens);
    // Every token is below a ceiling that was durably stored first...
    EXPECT_LT(token, store.last()) << "token " << token;
    EXPECT_EQ(tokens.Ceiling(), store.last());
    // ...and a new ceiling is stored exactly when the old one is reached.
    const bool crossed = token >= ceiling_before;
    EXPECT_EQ(store.persisted.size(), persists_before + (crossed ? 1 : 0))
        << "token " << token << ", ceiling before " << ceiling_before;
  }
  // One persist per block of three, not one per token.
  EXPECT_EQ(store.persisted.size(), 4u);
  EXPECT_TRUE(std::is_sorted(store.persisted.begin(), store.persisted.end()));
}

TEST(TokenAllocatorTest, ResumesAboveEveryTokenIssuedBeforeRestart) {
  FakeCeilingStore store;
  uint64_t highest = 0;
  {
    TokenAllocator before(0, 3, store.Callback());
    for (int i = 0; i < 7; ++i) highest = std::max(highest, MustNext(before));
  }
  const uint64_t stored_ceiling = store.last();
  ASSERT_GT(stored_ceiling, highest);

  TokenAllocator after(stored_ceiling, 3, store.Callback());
  const uint64_t first = MustNext(after);
  EXPECT_GT(first, highest);
  EXPECT_GE(first, stored_ceiling);
  EXPECT_GT(store.last(), first);  // The resumed block was reserved first.
}

TEST(TokenAllocatorTest, ResumesFromStoredCeilingWithoutIssuingBelowIt) {
  FakeCeilingStore store;
  TokenAllocator tokens(1000, 10, store.Callback());
  EXPECT_EQ(tokens.Ceiling(), 1000u);
  for (int i = 0; i < 25; ++i) EXPECT_GE(MustNext(tokens), 1000u);
}

TEST(TokenAllocatorTest, FailedPersistHandsOutNoTokenAndKeepsCeiling) {
  FakeCeilingStore store;
  TokenAllocator tokens(0, 3, store.Callback());
  store.fail = true;
  absl::StatusOr<uint64_t> refused = tokens.Next();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(tokens.Ceiling(), 0u);
  EXPECT_TRUE(store.persisted.empty());

  store.fail = false;
  const uint64_t token = MustNext(tokens);
  EXPECT_LT(token, tokens.Ceiling());
  EXPECT_EQ(tokens.Ceiling(), store.last());
}

TEST(TokenAllocatorTest, FailedPersistAtBlockEndNeverIssuesAboveStoredCeiling) {
  FakeCeilingStore store;
  TokenAllocator tokens(0, 3, store.Callback());
  std::vector<uint64_t> issued;
  for (int i = 0; i < 3; ++i) issued.push_back(MustNext(tokens));
  const uint64_t ceiling = tokens.Ceiling();

  store.fail = true;
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(tokens.Next().ok());
    EXPECT_EQ(tokens.Ceiling(), ceiling);
  }
  for (uint64_t token : issued) EXPECT_LT(token, ceiling);

  // Recovery continues above what was issued; nothing is handed out twice.
  store.fail = false;
  EXPECT_GT(MustNext(tokens), issued.back());
}

TEST(TokenAllocatorTest, ConcurrentCallersNeverShareAToken) {
  FakeCeilingStore store;
  TokenAllocator tokens(0, 7, store.Callback());
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&tokens, &got, t] {
      for (int i = 0; i < kPerThread; ++i) {
        absl::StatusOr<uint64_t> token = tokens.Next();
        if (token.ok()) got[t].push_back(*token);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::set<uint64_t> all;
  for (const std::vector<uint64_t>& tokens_of_thread : got) {
    EXPECT_EQ(tokens_of_thread.size(), static_cast<size_t>(kPerThread));
    // Each caller sees its own tokens increase.
    EXPECT_TRUE(std::is_sorted(tokens_of_thread.begin(), tokens_of_thread.end()));
    all.insert(tokens_of_thread.begin(), tokens_of_thread.end());
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_LT(*all.rbegin(), tokens.Ceiling());
}

}  // namespace
}  // namespace dedup::storage
