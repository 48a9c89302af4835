#include "storage/ttl_compaction_filter.h"

#include <cstdint>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/slice.h"
#include "rocksdb/types.h"
#include "storage/clock.h"
#include "storage/record.h"
#include "storage/record_codec.h"

namespace dedup::storage {
namespace {

constexpr int64_t kNow = 1'700'000'000'000;
constexpr int64_t kGraceMs = 60'000;

Record WithState(State state) {
  Record r;
  r.state = state;
  r.owner = "worker-a";
  r.token = 7;
  r.attempts = 1;
  r.created_ms = kNow - 100'000;
  r.updated_ms = kNow - 100'000;
  return r;
}

Record CompletedUntil(int64_t retention_expires_ms) {
  Record r = WithState(State::kCompleted);
  r.retention_expires_ms = retention_expires_ms;
  r.result = "receipt";
  return r;
}

Record FailedUntil(int64_t retention_expires_ms) {
  Record r = WithState(State::kFailed);
  r.retention_expires_ms = retention_expires_ms;
  return r;
}

Record InProgressUntil(int64_t lease_expires_ms) {
  Record r = WithState(State::kInProgress);
  r.lease_expires_ms = lease_expires_ms;
  return r;
}

Record ReleasedAt(int64_t released_ms) {
  Record r = WithState(State::kReleased);
  r.lease_expires_ms = released_ms;
  return r;
}

// --- ExpiredForCompaction ---

TEST(ExpiredForCompactionTest, CompletedIsKeptUntilRetentionEnds) {
  const Record r = CompletedUntil(kNow);
  EXPECT_FALSE(ExpiredForCompaction(r, kNow - 1, kGraceMs));
  EXPECT_TRUE(ExpiredForCompaction(r, kNow, kGraceMs));
  EXPECT_TRUE(ExpiredForCompaction(r, kNow + 1, kGraceMs));
}

TEST(ExpiredForCompactionTest, CompletedGetsNoGraceAfterRetention) {
  EXPECT_TRUE(ExpiredForCompaction(CompletedUntil(kNow - 1), kNow, kGraceMs));
}

TEST(ExpiredForCompactionTest, FailedIsKeptUntilRetentionEnds) {
  const Record r = FailedUntil(kNow);
  EXPECT_FALSE(ExpiredForCompaction(r, kNow - 1, kGraceMs));
  EXPECT_TRUE(ExpiredForCompaction(r, kNow, kGraceMs));
}

TEST(ExpiredForCompactionTest, LiveLeaseIsKept) {
  EXPECT_FALSE(ExpiredForCompaction(InProgressUntil(kNow + 1), kNow, kGraceMs));
  EXPECT_FALSE(ExpiredForCompaction(InProgressUntil(kNow + 1), kNow, 0));
}

TEST(ExpiredForCompactionTest, AbandonedLeaseIsKeptForGraceThenDropped) {
  const Record r = InProgressUntil(kNow);
  // Lapsed, so reads see ABSENT, but its history (token, attempts) stays.
  EXPECT_FALSE(ExpiredForCompaction(r, kNow, kGraceMs));
  EXPECT_FALSE(ExpiredForCompaction(r, kNow + kGraceMs - 1, kGraceMs));
  EXPECT_TRUE(ExpiredForCompaction(r, kNow + kGraceMs, kGraceMs));
}

TEST(ExpiredForCompactionTest, ReleasedIsKeptForGraceAfterReleaseThenDropped) {
  const Record r = ReleasedAt(kNow);
  EXPECT_FALSE(ExpiredForCompaction(r, kNow + kGraceMs - 1, kGraceMs));
  EXPECT_TRUE(ExpiredForCompaction(r, kNow + kGraceMs, kGraceMs));
}

TEST(ExpiredForCompactionTest, AbsentIsNeverExpired) {
  EXPECT_FALSE(ExpiredForCompaction(WithState(State::kAbsent), kNow + 1'000'000'000, kGraceMs));
}

// --- The filter RocksDB runs ---

class TtlCompactionFilterTest : public ::testing::Test {
 protected:
  std::unique_ptr<rocksdb::CompactionFilter> NewFilter() {
    rocksdb::CompactionFilter::Context context{};
    context.is_full_compaction = true;
    context.is_manual_compaction = true;
    context.reason = rocksdb::TableFileCreationReason::kCompaction;
    return factory_.CreateCompactionFilter(context);
  }

  // True when the filter drops `value`.
  static bool Drops(const rocksdb::CompactionFilter& filter, const std::string& value) {
    std::string new_value;
    bool value_changed = false;
    const bool drop = filter.Filter(/*level=*/1, rocksdb::Slice("coupon-deduct\0k", 15),
                                    rocksdb::Slice(value), &new_value, &value_changed);
    EXPECT_FALSE(value_changed);
    return drop;
  }

  ManualClock clock_{kNow};
  CompactionDrops drops_;
  TtlCompactionFilterFactory factory_{[this] { return clock_.NowMs(); }, kGraceMs, &drops_};
};

TEST_F(TtlCompactionFilterTest, DropsExpiredRecordsAndCountsEachKind) {
  const auto filter = NewFilter();
  EXPECT_TRUE(Drops(*filter, EncodeRecord(CompletedUntil(kNow - 1))));
  EXPECT_TRUE(Drops(*filter, EncodeRecord(CompletedUntil(kNow))));
  EXPECT_TRUE(Drops(*filter, EncodeRecord(FailedUntil(kNow - 1))));
  EXPECT_TRUE(Drops(*filter, EncodeRecord(InProgressUntil(kNow - kGraceMs))));
  EXPECT_TRUE(Drops(*filter, EncodeRecord(ReleasedAt(kNow - kGraceMs))));

  EXPECT_EQ(drops_.completed.load(), 2u);
  EXPECT_EQ(drops_.failed.load(), 1u);
  EXPECT_EQ(drops_.abandoned.load(), 2u);
}

TEST_F(TtlCompactionFilterTest, KeepsLiveRecordsWithoutCounting) {
  const auto filter = NewFilter();
  EXPECT_FALSE(Drops(*filter, EncodeRecord(CompletedUntil(kNow + 1))));
  EXPECT_FALSE(Drops(*filter, EncodeRecord(FailedUntil(kNow + 1))));
  EXPECT_FALSE(Drops(*filter, EncodeRecord(InProgressUntil(kNow + 1))));
  EXPECT_FALSE(Drops(*filter, EncodeRecord(InProgressUntil(kNow - kGraceMs + 1))));
  EXPECT_FALSE(Drops(*filter, EncodeRecord(ReleasedAt(kNow - kGraceMs + 1))));

  EXPECT_EQ(drops_.completed.load(), 0u);
  EXPECT_EQ(drops_.failed.load(), 0u);
  EXPECT_EQ(drops_.abandoned.load(), 0u);
}

TEST_F(TtlCompactionFilterTest, KeepsValuesItCannotDecode) {
  const auto filter = NewFilter();
  std::string unknown_version = EncodeRecord(CompletedUntil(kNow - 1));
  unknown_version[0] = '\x02';
  std::string truncated = EncodeRecord(CompletedUntil(kNow - 1));
  truncated.pop_back();

  EXPECT_FALSE(Drops(*filter, ""));
  EXPECT_FALSE(Drops(*filter, "not a record"));
  EXPECT_FALSE(Drops(*filter, unknown_version));
  EXPECT_FALSE(Drops(*filter, truncated));
  EXPECT_EQ(drops_.completed.load() + drops_.failed.load() + drops_.abandoned.load(), 0u);
}

TEST_F(TtlCompactionFilterTest, EachCompactionJudgesByTheClockWhenItStarted) {
  const auto before = NewFilter();
  clock_.AdvanceMs(1000);
  const auto after = NewFilter();

  const std::string expiring = EncodeRecord(CompletedUntil(kNow + 500));
  EXPECT_FALSE(Drops(*before, expiring));
  EXPECT_TRUE(Drops(*after, expiring));
}

}  // namespace
}  // namespace dedup::storage
