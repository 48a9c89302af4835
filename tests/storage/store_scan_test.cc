#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"
#include "tests/storage/op_builders.h"
#include "tests/storage/store_fixture.h"

// Scan: records filtered by namespace, effective state and age, read in
// pages with a cursor that crosses shards.
namespace dedup::storage {
namespace {

TEST_F(StoreTest, ScanFiltersByState) {
  Acquire("in-progress", "worker-a");
  ASSERT_EQ(Do(Complete("completed", Acquire("completed", "worker-a"))).outcome, Outcome::kOk);
  ASSERT_EQ(Do(Release("released", Acquire("released", "worker-a"))).outcome, Outcome::kOk);
  ASSERT_EQ(Do(Release("failed", Acquire("failed", "worker-a"), 1)).outcome, Outcome::kFailed);
  ClaimOp short_claim = Claim("lapsed", "worker-a");
  short_claim.lease_ms = 1'000;
  ASSERT_EQ(Do(short_claim).outcome, Outcome::kAcquired);
  clock_.AdvanceMs(1'000);  // "lapsed" now reads ABSENT.

  using Keys = std::vector<std::string>;
  EXPECT_EQ(ScanKeys(State::kInProgress), Keys{"in-progress"});
  EXPECT_EQ(ScanKeys(State::kCompleted), Keys{"completed"});
  EXPECT_EQ(ScanKeys(State::kReleased), Keys{"released"});
  EXPECT_EQ(ScanKeys(State::kFailed), Keys{"failed"});
  EXPECT_EQ(ScanKeys(State::kAbsent), (Keys{"completed", "failed", "in-progress", "released"}));

  // Records carry their namespace, key and effective state.
  const std::map<std::string, State> expected = {
      {"in-progress", State::kInProgress},
      {"completed", State::kCompleted},
      {"released", State::kReleased},
      {"failed", State::kFailed},
  };
  ScanQuery query;
  query.ns = kNs;
  for (const Record& r : ScanAll(query)) {
    EXPECT_EQ(r.ns, kNs);
    ASSERT_EQ(expected.count(r.key), 1u) << r.key;
    EXPECT_EQ(r.state, expected.at(r.key)) << r.key;
  }
}

TEST_F(StoreTest, ScanFiltersByMinAge) {
  constexpr int64_t kTenMinutesMs = 10 * 60 * 1000;
  ClaimOp old_claim = Claim("old", "worker-a");
  old_claim.lease_ms = kDayMs;
  ASSERT_EQ(Do(old_claim).outcome, Outcome::kAcquired);
  clock_.AdvanceMs(kTenMinutesMs);
  Acquire("new", "worker-a");

  using Keys = std::vector<std::string>;
  EXPECT_EQ(ScanKeys(State::kInProgress, 0), (Keys{"new", "old"}));
  EXPECT_EQ(ScanKeys(State::kInProgress, kTenMinutesMs), Keys{"old"});
  EXPECT_EQ(ScanKeys(State::kInProgress, kTenMinutesMs + 1), Keys{});
}

TEST_F(StoreTest, ScanPagesWithCursorAcrossShards) {
  std::vector<std::string> keys;
  std::set<uint32_t> shards;
  for (int i = 0; i < 40; ++i) {
    keys.push_back("order-" + std::to_string(i));
    shards.insert(ShardOf(kNs, keys.back(), kShards));
    Acquire(keys.back(), "worker-a");
  }
  ASSERT_GT(shards.size(), 1u) << "the keys must span shards for this test";
  std::sort(keys.begin(), keys.end());

  ScanQuery query;
  query.ns = kNs;
  std::vector<Record> seen;
  ScanCursor cursor;
  int pages = 0;
  while (!cursor.done && pages < 100) {
    absl::StatusOr<ScanPage> page = store_->Scan(query, cursor, 7);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->records.size(), 7u);
    seen.insert(seen.end(), page->records.begin(), page->records.end());
    cursor = page->next;
    ++pages;
  }
  EXPECT_TRUE(cursor.done);
  EXPECT_GE(pages, 6);            // 40 records, 7 a page.
  EXPECT_EQ(KeysOf(seen), keys);  // Every record exactly once.

  // A finished cursor stays finished.
  absl::StatusOr<ScanPage> after_end = store_->Scan(query, cursor, 7);
  ASSERT_TRUE(after_end.ok());
  EXPECT_TRUE(after_end->records.empty());
  EXPECT_TRUE(after_end->next.done);
}

TEST_F(StoreTest, ScanReturnsOnlyTheNamespaceAsked) {
  for (const char* ns : {"a", "ab", "a-b", "b", ""}) {
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(Do(Claim(std::string(ns) + "/" + std::to_string(i), "worker-a", "", ns)).outcome,
                Outcome::kAcquired);
    }
  }
  for (const char* ns : {"a", "ab", "b"}) {
    ScanQuery query;
    query.ns = ns;
    const std::vector<Record> records = ScanAll(query, 2);
    EXPECT_EQ(records.size(), 5u) << ns;
    for (const Record& r : records) {
      EXPECT_EQ(r.ns, ns);
      EXPECT_TRUE(absl::StartsWith(r.key, std::string(ns) + "/")) << r.key;
    }
  }
  ScanQuery unknown;
  unknown.ns = "c";
  EXPECT_TRUE(ScanAll(unknown).empty());
}

}  // namespace
}  // namespace dedup::storage

namespace dedup::storage {
namespace {

// A Scan for a rare state must not walk a whole namespace in one step: a
// page yields after examining its bound, matching or not, and the cursor
// resumes where it stopped.
TEST_F(StoreTest, ScanPageExaminesAtMostItsBoundAndResumes) {
  std::vector<std::string> completed;
  for (int i = 0; i < 30; ++i) {
    const std::string key = "order-" + std::to_string(i);
    const uint64_t token = Acquire(key, "worker-a");
    if (i % 10 == 0) {
      ASSERT_EQ(Do(Complete(key, token)).outcome, Outcome::kOk);
      completed.push_back(key);
    }
  }
  std::sort(completed.begin(), completed.end());
  ScanQuery query;
  query.ns = kNs;
  query.state = State::kCompleted;

  std::vector<Record> seen;
  ScanCursor cursor;
  int pages = 0;
  while (!cursor.done && pages < 100) {
    absl::StatusOr<ScanPage> page = store_->Scan(query, cursor, 100, 4);
    ASSERT_TRUE(page.ok()) << page.status();
    seen.insert(seen.end(), page->records.begin(), page->records.end());
    cursor = page->next;
    ++pages;
  }

  EXPECT_TRUE(cursor.done);
  EXPECT_GE(pages, 30 / 4) << "each page examined at most 4 of the 30 records";
  EXPECT_EQ(KeysOf(seen), completed) << "every match exactly once";
}

}  // namespace
}  // namespace dedup::storage
