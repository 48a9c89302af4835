#ifndef DEDUP_TESTS_STORAGE_STORE_FIXTURE_H_
#define DEDUP_TESTS_STORAGE_STORE_FIXTURE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "storage/clock.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/common/temp_dir.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/printers.h"

// The Store end to end: a real RocksDB in a fresh temp directory per test,
// time moved by a ManualClock. The store_*_test.cc files each pin one area of
// design.md §3-§5 with this fixture.
namespace dedup::storage {

inline constexpr int64_t kStartMs = 1'700'000'000'000;
inline constexpr int64_t kGraceMs = 60'000;
inline constexpr int64_t kDayMs = 24 * 3'600'000;
inline constexpr uint32_t kShards = 4;

// The column families of the stores under test: 0 (the built-in, a family
// per shard at this shard count), or what DEDUP_TEST_SHARD_FAMILIES says,
// which runs the suite again on shards that share families
// (tests/storage/CMakeLists.txt).
inline uint32_t SharedFamiliesForTesting() {
  const char* families = std::getenv("DEDUP_TEST_SHARD_FAMILIES");
  return families == nullptr ? 0 : static_cast<uint32_t>(std::strtoul(families, nullptr, 10));
}

// The keys of `records`, sorted.
inline std::vector<std::string> KeysOf(const std::vector<Record>& records) {
  std::vector<std::string> keys;
  for (const Record& r : records) keys.push_back(r.key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Open(Options())); }

  StoreOptions Options() const {
    StoreOptions options;
    options.path = dir_.Sub("data");
    options.shards = kShards;
    options.abandoned_grace_ms = kGraceMs;
    options.clock = &clock_;
    // The suite runs twice, the second time on hash memtables
    // (tests/storage/CMakeLists.txt).
    const char* memtable = std::getenv("DEDUP_TEST_MEMTABLE");
    options.hash_memtable = memtable != nullptr && std::string(memtable) == "hash";
    options.shard_families = SharedFamiliesForTesting();
    return options;
  }

  // Closes the open store, if any, and opens `options`.
  void Open(const StoreOptions& options) {
    store_.reset();
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  void Close() { store_.reset(); }

  OpResult Do(const Operation& op) {
    absl::StatusOr<OpResult> result = store_->Apply(op);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : OpResult{};
  }

  // Claims `key` for `owner`, expecting to win; returns the token.
  uint64_t Acquire(const std::string& key, const std::string& owner) {
    const OpResult r = Do(Claim(key, owner));
    EXPECT_EQ(r.outcome, Outcome::kAcquired) << key << " for " << owner;
    return r.record.token;
  }

  // Every record `query` matches, read page by page.
  std::vector<Record> ScanAll(const ScanQuery& query, size_t page_size = 100) {
    std::vector<Record> all;
    ScanCursor cursor;
    for (int pages = 0; !cursor.done; ++pages) {
      if (pages > 10'000) {
        ADD_FAILURE() << "scan never finished";
        break;
      }
      absl::StatusOr<ScanPage> page = store_->Scan(query, cursor, page_size);
      if (!page.ok()) {
        ADD_FAILURE() << page.status();
        break;
      }
      EXPECT_LE(page->records.size(), page_size);
      all.insert(all.end(), page->records.begin(), page->records.end());
      cursor = page->next;
    }
    return all;
  }

  // The sorted keys of kNs in `state` at least `min_age_ms` old.
  std::vector<std::string> ScanKeys(State state, int64_t min_age_ms = 0) {
    ScanQuery query;
    query.ns = kNs;
    query.state = state;
    query.min_age_ms = min_age_ms;
    return KeysOf(ScanAll(query));
  }

  // Member order matters: the store closes before its clock and directory go.
  test::TempDir dir_;
  ManualClock clock_{kStartMs};
  std::unique_ptr<Store> store_;
};

}  // namespace dedup::storage

#endif  // DEDUP_TESTS_STORAGE_STORE_FIXTURE_H_
