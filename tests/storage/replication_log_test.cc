// The per-shard replication log (storage/replication_log.h,
// docs/replication.md §2-§4) on a real RocksDB: leader appends, follower
// appends with the previous entry checked, promises that fence older
// epochs, the replacement of an uncommitted tail, applying entries to the
// shard's records with the applied position, trimming, reopening, and a
// power loss on the fault file system.

#include "storage/replication_log.h"

#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "rocksdb/write_batch.h"
#include "storage/compaction_drops.h"
#include "storage/data_dir.h"
#include "storage/testing/rocksdb_env.h"
#include "tests/common/fault_injection_file_system.h"
#include "tests/common/temp_dir.h"
#include "tests/storage/store_fixture.h"

namespace dedup::storage {
namespace {

constexpr uint32_t kShard = 2;

// A logged batch: puts of `keys` (value "v-" + key) and deletes of `gone`,
// naming no column family.
std::string Batch(const std::vector<std::string>& keys, const std::vector<std::string>& gone = {}) {
  rocksdb::WriteBatch batch;
  for (const std::string& key : keys) EXPECT_TRUE(batch.Put(key, "v-" + key).ok());
  for (const std::string& key : gone) EXPECT_TRUE(batch.Delete(key).ok());
  return batch.Data();
}

LogEntry Entry(uint64_t epoch, uint64_t seq, const std::vector<std::string>& keys) {
  return LogEntry{epoch, seq, Batch(keys)};
}

std::string Positions(const std::vector<LogEntry>& entries) {
  std::string out;
  for (const LogEntry& e : entries)
    out += std::to_string(e.epoch) + "/" + std::to_string(e.seq) + " ";
  return out;
}

class ReplicationLogTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Open()); }
  void TearDown() override { Close(); }

  void Open(Durability durability = Durability::kFsync) {
    Close();
    StoreOptions options;
    options.path = dir_.Sub(families_ == 0 ? "data" : "shared");
    options.shards = 4;
    options.shard_families = families_;
    options.hash_memtable = hash_memtable_;
    if (env_ != nullptr) SetRocksDbEnvForTesting(&options, env_);
    absl::StatusOr<std::unique_ptr<DataDir>> data = DataDir::Open(options, &drops_);
    ASSERT_TRUE(data.ok()) << data.status();
    data_ = *std::move(data);
    absl::StatusOr<std::unique_ptr<ReplicationLog>> log =
        ReplicationLog::Open(data_.get(), durability);
    ASSERT_TRUE(log.ok()) << log.status();
    log_ = *std::move(log);
  }

  void Close() {
    log_.reset();
    data_.reset();
  }

  // The shard's record value of `key`, or "(none)".
  std::string Record(const std::string& key) { return Record(kShard, key); }
  std::string Record(uint32_t shard, const std::string& key) {
    std::string value;
    rocksdb::Status s = data_->db()->Get(rocksdb::ReadOptions(), data_->shard(shard),
                                         data_->RecordKey(shard, key), &value);
    return s.ok() ? value : "(none)";
  }

  std::vector<LogEntry> ReadAll(uint64_t from = 1) {
    absl::StatusOr<std::vector<LogEntry>> entries = log_->Read(kShard, from, 1 << 30);
    EXPECT_TRUE(entries.ok()) << entries.status();
    return entries.ok() ? *entries : std::vector<LogEntry>{};
  }

  dedup::test::TempDir dir_;
  // 0: a family per shard; DEDUP_TEST_SHARD_FAMILIES runs the suite again
  // on shards that share families (tests/storage/CMakeLists.txt).
  uint32_t families_ = SharedFamiliesForTesting();
  bool hash_memtable_ = false;
  CompactionDrops drops_;
  std::shared_ptr<rocksdb::Env> env_;
  std::unique_ptr<DataDir> data_;
  std::unique_ptr<ReplicationLog> log_;
};

TEST_F(ReplicationLogTest, ANewLogIsEmptyAtPositionZero) {
  EXPECT_EQ(log_->Last(kShard), (LogPosition{0, 0}));
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{0, 0}));
  EXPECT_EQ(log_->Promised(kShard), 0u);
  EXPECT_TRUE(ReadAll().empty());
}

TEST_F(ReplicationLogTest, TheLeaderAppendsConsecutiveEntriesReadBackInOrder) {
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    absl::StatusOr<LogPosition> at = log_->Append(kShard, 1, Batch({"k" + std::to_string(seq)}));
    ASSERT_TRUE(at.ok()) << at.status();
    EXPECT_EQ(*at, (LogPosition{1, seq}));
  }
  ASSERT_TRUE(log_->Append(kShard, 2, Batch({"k4"})).ok());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{2, 4}));
  EXPECT_EQ(log_->Last(kShard + 1), (LogPosition{0, 0})) << "shards have logs of their own";

  const std::vector<LogEntry> entries = ReadAll();
  EXPECT_EQ(Positions(entries), "1/1 1/2 1/3 2/4 ");
  EXPECT_EQ(entries[1].batch, Batch({"k2"}));
  EXPECT_EQ(Positions(ReadAll(3)), "1/3 2/4 ");
  absl::StatusOr<std::vector<LogEntry>> first = log_->Read(kShard, 1, 1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Positions(*first), "1/1 ") << "at least one entry, then the byte budget";
  // Not applied: no record exists yet.
  EXPECT_EQ(Record("k1"), "(none)");
}

TEST_F(ReplicationLogTest, ApplyingWritesTheRecordsAndTheAppliedPositionTogether) {
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"a", "b"})).ok());
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"c"}, {"a"})).ok());
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"d"})).ok());

  ASSERT_TRUE(log_->ApplyThrough(kShard, 2).ok());
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{1, 2}));
  EXPECT_EQ(Record("a"), "(none)") << "deleted by entry 2";
  EXPECT_EQ(Record("b"), "v-b");
  EXPECT_EQ(Record("c"), "v-c");
  EXPECT_EQ(Record("d"), "(none)") << "entry 3 is not applied yet";
  std::string value;
  EXPECT_TRUE(
      data_->db()->Get(rocksdb::ReadOptions(), data_->shard(kShard + 1), "b", &value).IsNotFound())
      << "applied to this shard's family only";

  EXPECT_EQ(log_->ApplyThrough(kShard, 4).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(log_->ApplyThrough(kShard, 2).ok()) << "applying again is nothing to do";
}

// What a caller just appended is applied as it holds it, and the rest is
// read back: here the caller's copy of entry 3 differs from the log's, to
// tell the two apart (a real caller's is the same).
TEST_F(ReplicationLogTest, ApplyingTakesTheCallersEntriesAndReadsBackTheOthers) {
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"a"})).ok());
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"b"})).ok());
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"logged"})).ok());
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"d"})).ok());
  const std::vector<LogEntry> known = {Entry(1, 3, {"held"})};

  ASSERT_TRUE(log_->ApplyThrough(kShard, 3, known).ok());
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{1, 3}));
  EXPECT_EQ(Record("a"), "v-a") << "entries 1 and 2 are read back";
  EXPECT_EQ(Record("b"), "v-b");
  EXPECT_EQ(Record("held"), "v-held") << "entry 3 is the caller's";
  EXPECT_EQ(Record("logged"), "(none)");

  // An entry the caller holds at another seq is not used for this one.
  ASSERT_TRUE(log_->ApplyThrough(kShard, 4, {Entry(1, 9, {"elsewhere"})}).ok());
  EXPECT_EQ(Record("d"), "v-d");
  EXPECT_EQ(Record("elsewhere"), "(none)");
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{1, 4}));

  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{1, 4})) << "persisted with the records";
  EXPECT_EQ(Record("held"), "v-held");
}

// A leader's call that wrote to several shards applies them together:
// each shard through its own entry, the caller's copy used where it has
// one, and a shard that cannot be applied fails alone.
TEST_F(ReplicationLogTest, ApplyingSeveralShardsTakesEachThroughItsOwnEntry) {
  ASSERT_TRUE(log_->Append(1, 1, Batch({"one-a"})).ok());
  ASSERT_TRUE(log_->Append(1, 1, Batch({"one-logged"})).ok());
  ASSERT_TRUE(log_->Append(1, 1, Batch({"one-later"})).ok());
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"two-a"}, {"two-gone"})).ok());
  ASSERT_TRUE(log_->Append(3, 1, Batch({"three-a"})).ok());
  const std::vector<LogEntry> known = {Entry(1, 2, {"one-held"})};

  const std::vector<absl::Status> applied =
      log_->ApplyAll({{kShard, 1, {}}, {1, 2, known}, {3, 5, {}}});
  ASSERT_EQ(applied.size(), 3u);
  EXPECT_TRUE(applied[0].ok()) << applied[0];
  EXPECT_TRUE(applied[1].ok()) << applied[1];
  EXPECT_EQ(applied[2].code(), absl::StatusCode::kOutOfRange) << "shard 3's log ends at 1";
  EXPECT_EQ(log_->Applied(1), (LogPosition{1, 2}));
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{1, 1}));
  EXPECT_EQ(log_->Applied(3), (LogPosition{}));
  EXPECT_EQ(Record(1, "one-a"), "v-one-a") << "read back";
  EXPECT_EQ(Record(1, "one-held"), "v-one-held") << "the caller's copy of entry 2";
  EXPECT_EQ(Record(1, "one-logged"), "(none)");
  EXPECT_EQ(Record(1, "one-later"), "(none)") << "entry 3 is not applied yet";
  EXPECT_EQ(Record(kShard, "two-a"), "v-two-a");
  EXPECT_EQ(Record(3, "three-a"), "(none)");

  const std::vector<absl::Status> twice = log_->ApplyAll({{3, 1, {}}, {3, 1, {}}});
  for (const absl::Status& status : twice) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "a shard named twice";
  }
  EXPECT_EQ(Record(3, "three-a"), "(none)") << "nothing applied";

  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(log_->Applied(1), (LogPosition{1, 2})) << "persisted with the records";
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{1, 1}));
  EXPECT_EQ(Record(1, "one-held"), "v-one-held");
}

TEST_F(ReplicationLogTest, PositionsAndPromisesSurviveAReopen) {
  ASSERT_TRUE(log_->Append(kShard, 3, Batch({"a"})).ok());
  ASSERT_TRUE(log_->Append(kShard, 3, Batch({"b"})).ok());
  ASSERT_TRUE(log_->ApplyThrough(kShard, 1).ok());
  ASSERT_TRUE(log_->Promise(kShard, 4).ok());

  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{3, 2}));
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{3, 1}));
  EXPECT_EQ(log_->Promised(kShard), 4u);
  EXPECT_EQ(Record("a"), "v-a");
}

TEST_F(ReplicationLogTest, ADirectoryHasNotJoinedUntilMarkedAndStaysJoinedAcrossAReopen) {
  EXPECT_FALSE(log_->Joined());
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_FALSE(log_->Joined()) << "a reopen alone does not make a directory joined";
  ASSERT_TRUE(log_->MarkJoined().ok());
  EXPECT_TRUE(log_->Joined());
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_TRUE(log_->Joined());
}

TEST_F(ReplicationLogTest, ARestoreKeepsTheJoinedMark) {
  ASSERT_TRUE(log_->MarkJoined().ok());
  ASSERT_TRUE(log_->BeginRestore(kShard).ok());
  ASSERT_TRUE(log_->FinishRestore(kShard, {2, 5}).ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_TRUE(log_->Joined());
}

TEST_F(ReplicationLogTest, APromiseFencesEveryOlderEpoch) {
  ASSERT_TRUE(log_->Append(kShard, 1, Batch({"a"})).ok());
  absl::StatusOr<LogPosition> promised = log_->Promise(kShard, 2);
  ASSERT_TRUE(promised.ok()) << promised.status();
  EXPECT_EQ(*promised, (LogPosition{1, 1})) << "the candidate learns where this log ends";

  EXPECT_EQ(log_->Promise(kShard, 2).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(log_->Promise(kShard, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  // The old leader of epoch 1 can no longer append, here or through a
  // follower's append.
  EXPECT_EQ(log_->Append(kShard, 1, Batch({"b"})).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(log_->AppendAfter(kShard, 1, {1, 1}, {Entry(1, 2, {"b"})}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(log_->Last(kShard), (LogPosition{1, 1}));
  // The new leader can.
  EXPECT_TRUE(log_->Append(kShard, 2, Batch({"b"})).ok());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{2, 2}));
}

TEST_F(ReplicationLogTest, ANewLeaderShipsInheritedEntriesAndItsEpochFencesOlderLeaders) {
  ASSERT_TRUE(log_->AppendAfter(kShard, 1, {0, 0}, {Entry(1, 1, {"a"})}).ok());
  ASSERT_TRUE(log_->Promise(kShard, 2).ok());
  // The leader of epoch 2 inherited entry 2 from epoch 1 and ships it.
  ASSERT_TRUE(log_->AppendAfter(kShard, 2, {1, 1}, {Entry(1, 2, {"b"}), Entry(2, 3, {"c"})}).ok());
  EXPECT_EQ(Positions(ReadAll()), "1/1 1/2 2/3 ");
  EXPECT_EQ(log_->AppendAfter(kShard, 2, {2, 3}, {Entry(3, 4, {"d"})}).code(),
            absl::StatusCode::kInvalidArgument)
      << "an entry above the leader's epoch";

  // An append from the leader of epoch 3 raises the promise without a vote.
  ASSERT_TRUE(log_->AppendAfter(kShard, 3, {2, 3}, {}).ok());
  EXPECT_EQ(log_->Promised(kShard), 3u);
  EXPECT_EQ(log_->AppendAfter(kShard, 2, {2, 3}, {Entry(2, 4, {"x"})}).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(log_->Promised(kShard), 3u) << "the raised promise is persisted";
}

TEST_F(ReplicationLogTest, AFollowerAppendsOnlyAfterTheLeadersPreviousEntry) {
  EXPECT_EQ(log_->AppendAfter(kShard, 1, {1, 5}, {Entry(1, 6, {"x"})}).code(),
            absl::StatusCode::kAborted)
      << "this log does not reach entry 5";
  ASSERT_TRUE(log_->AppendAfter(kShard, 1, {0, 0}, {Entry(1, 1, {"a"}), Entry(1, 2, {"b"})}).ok());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{1, 2}));
  EXPECT_EQ(log_->AppendAfter(kShard, 2, {2, 2}, {Entry(2, 3, {"c"})}).code(),
            absl::StatusCode::kAborted)
      << "entry 2 is of epoch 1 here";
  EXPECT_EQ(log_->AppendAfter(kShard, 1, {1, 2}, {Entry(1, 4, {"c"})}).code(),
            absl::StatusCode::kInvalidArgument)
      << "a gap in the entries sent";
  ASSERT_TRUE(log_->AppendAfter(kShard, 2, {1, 2}, {Entry(2, 3, {"c"})}).ok());
  // The same append again (a retried message) changes nothing.
  ASSERT_TRUE(log_->AppendAfter(kShard, 2, {1, 2}, {Entry(2, 3, {"c"})}).ok());
  EXPECT_EQ(Positions(ReadAll()), "1/1 1/2 2/3 ");
}

TEST_F(ReplicationLogTest, SeveralShardsAppendInOneWriteAndAShardThatFailsAddsNothing) {
  // Shard 0 promised epoch 3; shard 1 holds entries 1-2 of epoch 1, the
  // second of them applied; shard 3 is empty.
  ASSERT_TRUE(log_->Promise(0, 3).ok());
  ASSERT_TRUE(log_->AppendAfter(1, 1, {0, 0}, {Entry(1, 1, {"a"}), Entry(1, 2, {"b"})}).ok());
  ASSERT_TRUE(log_->ApplyThrough(1, 2).ok());
  const std::vector<LogEntry> fenced = {Entry(2, 1, {"f"})};
  const std::vector<LogEntry> replaces_applied = {Entry(2, 2, {"r"}), Entry(2, 3, {"s"})};
  const std::vector<LogEntry> fine = {Entry(2, 1, {"x"}), Entry(2, 2, {"y"})};
  const std::vector<LogEntry> gap = {Entry(2, 2, {"g"})};
  const std::vector<ReplicationLog::FollowerAppend> appends = {
      {3, 2, {0, 0}, fine},
      {0, 2, {0, 0}, fenced},
      {1, 2, {1, 1}, replaces_applied},
      {kShard, 2, {0, 0}, gap},
  };
  const std::vector<absl::Status> results = log_->AppendAfterAll(appends);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_EQ(results[1].code(), absl::StatusCode::kFailedPrecondition) << results[1];
  EXPECT_EQ(results[2].code(), absl::StatusCode::kInternal) << results[2];
  EXPECT_EQ(results[3].code(), absl::StatusCode::kInvalidArgument) << results[3];
  EXPECT_EQ(log_->Last(3), (LogPosition{2, 2}));
  EXPECT_EQ(log_->Promised(3), 2u) << "a later leader's epoch is promised with its entries";
  EXPECT_EQ(log_->Last(0), (LogPosition{0, 0}));
  EXPECT_EQ(log_->Last(1), (LogPosition{1, 2}));
  EXPECT_EQ(log_->Promised(1), 1u) << "the failed shard's promise is not written either";
  EXPECT_EQ(Positions(log_->Read(1, 1, 1 << 20).value()), "1/1 1/2 ")
      << "nothing of the failed shard's append was written";

  // Through a reopen: what the one write carried, and nothing else.
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(log_->Last(3), (LogPosition{2, 2}));
  EXPECT_EQ(log_->Promised(3), 2u);
  EXPECT_EQ(log_->Last(1), (LogPosition{1, 2}));
  EXPECT_EQ(log_->Promised(1), 1u);
  EXPECT_EQ(log_->Last(kShard), (LogPosition{0, 0}));

  const std::vector<ReplicationLog::FollowerAppend> twice = {{3, 2, {2, 2}, {}},
                                                             {3, 2, {2, 2}, {}}};
  for (const absl::Status& status : log_->AppendAfterAll(twice)) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(ReplicationLogTest, AnUncommittedTailOfAnOlderEpochIsReplaced) {
  // An old leader of epoch 1 wrote three entries here; only the first was
  // committed (and applied) before it failed.
  ASSERT_TRUE(log_->AppendAfter(kShard, 1, {0, 0},
                                {Entry(1, 1, {"a"}), Entry(1, 2, {"b"}), Entry(1, 3, {"c"})})
                  .ok());
  ASSERT_TRUE(log_->ApplyThrough(kShard, 1).ok());

  // The leader of epoch 2 holds entry 1 and its own entry 2.
  ASSERT_TRUE(log_->AppendAfter(kShard, 2, {1, 1}, {Entry(2, 2, {"z"})}).ok());
  EXPECT_EQ(Positions(ReadAll()), "1/1 2/2 ");
  EXPECT_EQ(log_->Last(kShard), (LogPosition{2, 2}));
  ASSERT_TRUE(log_->ApplyThrough(kShard, 2).ok());
  EXPECT_EQ(Record("z"), "v-z");
  EXPECT_EQ(Record("b"), "(none)") << "the replaced entry was never applied";

  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{2, 2}));
}

TEST_F(ReplicationLogTest, AnAppliedEntryIsNeverReplaced) {
  ASSERT_TRUE(log_->AppendAfter(kShard, 1, {0, 0}, {Entry(1, 1, {"a"}), Entry(1, 2, {"b"})}).ok());
  ASSERT_TRUE(log_->ApplyThrough(kShard, 2).ok());

  EXPECT_EQ(log_->AppendAfter(kShard, 2, {1, 1}, {Entry(2, 2, {"z"})}).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(Positions(ReadAll()), "1/1 1/2 ");
}

TEST_F(ReplicationLogTest, OnlyAppliedEntriesAreTrimmedAndTheLogEndSurvivesIt) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(log_->Append(kShard, 1, Batch({"k"})).ok());
  ASSERT_TRUE(log_->ApplyThrough(kShard, 2).ok());

  EXPECT_EQ(log_->TrimThrough(kShard, 3).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(log_->TrimThrough(kShard, 2).ok());
  EXPECT_EQ(Positions(ReadAll()), "1/3 1/4 ");
  ASSERT_TRUE(log_->ApplyThrough(kShard, 4).ok());
  ASSERT_TRUE(log_->TrimThrough(kShard, 4).ok());
  EXPECT_TRUE(ReadAll().empty());

  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{1, 4})) << "an emptied log ends where it was applied";
  EXPECT_EQ(log_->AppendAfter(kShard, 1, {1, 2}, {Entry(1, 3, {"k"})}).code(),
            absl::StatusCode::kAborted)
      << "entries before 5 are trimmed";
  ASSERT_TRUE(log_->AppendAfter(kShard, 2, {1, 4}, {Entry(2, 5, {"n"})}).ok());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{2, 5}));
}

// The log keeps its newest entries in memory and reads, ships and applies
// them from there. Whatever a seeded mix of leader and follower appends
// (replacing uncommitted tails), applies, trims, promises and restores did,
// every read answers exactly what the entries written to RocksDB say: a
// second log on the same data directory, with nothing in memory, reads
// them from RocksDB alone.
TEST_F(ReplicationLogTest, ReadsFromMemoryAnswerWhatRocksDbHolds) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kBuffered));
  absl::StatusOr<std::unique_ptr<ReplicationLog>> opened =
      ReplicationLog::Open(data_.get(), Durability::kBuffered);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const ReplicationLog& stored = **opened;
  std::mt19937_64 random(20261206);
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : random() % n; };
  // One leader per epoch writes one entry per seq: an entry's content is
  // a function of its position, as in the protocol.
  auto at = [](uint64_t epoch, uint64_t seq) {
    return Batch({"e" + std::to_string(epoch) + "-" + std::to_string(seq)});
  };
  uint64_t epoch = 1;
  for (int step = 0; step < 1500; ++step) {
    const LogPosition last = log_->Last(kShard);
    const LogPosition applied = log_->Applied(kShard);
    const uint64_t op = pick(100);
    std::string did;
    if (op < 35) {
      did = "append";
      (void)log_->Append(kShard, epoch, at(epoch, last.seq + 1));
    } else if (op < 45) {
      did = "append all";
      (void)log_->AppendAll({{kShard, epoch, at(epoch, last.seq + 1)},
                             {kShard + 1, epoch, at(epoch, log_->Last(kShard + 1).seq + 1)}});
    } else if (op < 70) {
      // A follower's append after an entry it may or may not hold, from a
      // leader of this epoch or the next; some replace a tail, some fail.
      const uint64_t leader_epoch = epoch + pick(2);
      const uint64_t prev_seq = applied.seq + pick(last.seq - applied.seq + 2);
      std::vector<LogEntry> held = ReadAll(prev_seq);
      LogPosition prev{held.empty() || held.front().seq != prev_seq ? epoch : held.front().epoch,
                       prev_seq};
      if (prev_seq == applied.seq) prev = applied;
      std::vector<LogEntry> entries;
      for (uint64_t n = pick(6), seq = prev_seq + 1; n > 0; --n, ++seq) {
        uint64_t e = std::max(prev.epoch, leader_epoch - pick(2));
        if (!entries.empty()) e = std::max(e, entries.back().epoch);
        entries.push_back(LogEntry{e, seq, at(e, seq)});
      }
      did = "follower append";
      if (log_->AppendAfter(kShard, leader_epoch, prev, entries).ok()) {
        epoch = std::max(epoch, leader_epoch);
      }
    } else if (op < 82) {
      did = "apply";
      (void)log_->ApplyThrough(kShard, applied.seq + pick(last.seq - applied.seq + 1));
    } else if (op < 90) {
      did = "trim";
      (void)log_->TrimThrough(kShard, pick(applied.seq + 1));
    } else if (op < 97) {
      did = "promise";
      if (log_->Promise(kShard, epoch + 1).ok()) ++epoch;
    } else {
      did = "restore";
      ASSERT_TRUE(log_->BeginRestore(kShard).ok());
      ASSERT_TRUE(log_->FinishRestore(kShard, {epoch, last.seq + pick(3)}).ok());
    }
    const LogPosition now = log_->Last(kShard);
    // The log's first entries, its end, and starts among the last 80
    // (the tail holds up to 64).
    std::vector<uint64_t> starts = {0, 1, now.seq, now.seq + 1};
    for (int i = 0; i < 6; ++i)
      starts.push_back(now.seq + 1 - std::min<uint64_t>(now.seq, pick(81)));
    for (uint64_t from : starts) {
      for (size_t max_bytes : {size_t{200}, size_t{1} << 30}) {
        absl::StatusOr<std::vector<LogEntry>> live = log_->Read(kShard, from, max_bytes);
        absl::StatusOr<std::vector<LogEntry>> disk = stored.Read(kShard, from, max_bytes);
        ASSERT_TRUE(live.ok() && disk.ok());
        ASSERT_EQ(Positions(*live), Positions(*disk))
            << "step " << step << " (" << did << "), from " << from << ", " << max_bytes
            << " bytes";
        for (size_t i = 0; i < live->size(); ++i) {
          ASSERT_EQ((*live)[i].batch, (*disk)[i].batch) << "step " << step << ", from " << from;
        }
      }
    }
  }
  EXPECT_GT(log_->Applied(kShard).seq, 50u) << "the mix applied entries";
}

TEST_F(ReplicationLogTest, ARestoreCopiesTheRecordsAndTheLogContinuesAfterItsPosition) {
  // The source: a leader's shard with three records, applied through 1/3.
  for (const char* key : {"a", "b", "c"}) ASSERT_TRUE(log_->Append(kShard, 1, Batch({key})).ok());
  ASSERT_TRUE(log_->ApplyThrough(kShard, 3).ok());
  std::vector<std::pair<std::string, std::string>> copied;
  std::string after;
  for (int pages = 0;; ++pages) {
    ASSERT_LT(pages, 10);
    absl::StatusOr<ReplicationLog::RecordPage> page = log_->ReadRecords(kShard, after, 1);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->records.size(), 1u) << "one record per page at a 1-byte budget";
    copied.insert(copied.end(), page->records.begin(), page->records.end());
    if (page->done) break;
    after = page->last_key;
  }
  ASSERT_EQ(copied.size(), 3u);
  EXPECT_EQ(copied[1], std::make_pair(std::string("b"), std::string("v-b")));

  // The same directory plays the replica re-seeded: it held a stale record
  // and a log of its own, which the restore drops; its promise stays.
  ASSERT_TRUE(log_->Promise(kShard, 2).ok());
  ASSERT_TRUE(log_->BeginRestore(kShard).ok());
  EXPECT_EQ(Record("a"), "(none)");
  EXPECT_EQ(log_->Last(kShard), (LogPosition{0, 0}));
  ASSERT_TRUE(log_->RestoreRecords(kShard, copied).ok());
  ASSERT_TRUE(log_->FinishRestore(kShard, {1, 3}).ok());
  EXPECT_EQ(Record("b"), "v-b");
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{1, 3}));
  EXPECT_EQ(log_->Promised(kShard), 2u);
  EXPECT_EQ(log_->AppendAfter(kShard, 2, {1, 2}, {Entry(1, 3, {"x"})}).code(),
            absl::StatusCode::kAborted)
      << "nothing before the restored position is held";
  ASSERT_TRUE(log_->AppendAfter(kShard, 2, {1, 3}, {Entry(2, 4, {"d"})}).ok());
  ASSERT_TRUE(log_->ApplyThrough(kShard, 4).ok());
  EXPECT_EQ(Record("d"), "v-d");

  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(log_->Applied(kShard), (LogPosition{2, 4})) << "the restore survives a restart";
  EXPECT_EQ(Record("c"), "v-c");
}

// A re-seed's copy walks the records page by page on one iterator: in key
// order, each record once, as they were when the walk began, on either
// memtable (a hashed one sorts for the walk, and what it holds then).
TEST_F(ReplicationLogTest, AWalkOfRecordsSeesThemAsTheyWereWhenItBegan) {
  for (bool hashed : {false, true}) {
    SCOPED_TRACE(hashed ? "hash memtable" : "skip list");
    hash_memtable_ = hashed;
    Close();
    std::filesystem::remove_all(dir_.Sub("data"));
    std::filesystem::remove_all(dir_.Sub("shared"));
    ASSERT_NO_FATAL_FAILURE(Open());
    const std::vector<std::string> keys = {"d", "a", "e", "c", "b"};
    for (const std::string& key : keys) ASSERT_TRUE(log_->Append(kShard, 1, Batch({key})).ok());
    ASSERT_TRUE(log_->ApplyThrough(kShard, keys.size()).ok());
    // Another shard's records, which a shared family also holds.
    ASSERT_TRUE(log_->Append(kShard + 1, 1, Batch({"a0", "zz"})).ok());
    ASSERT_TRUE(log_->ApplyThrough(kShard + 1, 1).ok());

    std::unique_ptr<ReplicationLog::RecordWalk> walk = log_->WalkRecords(kShard, "");
    std::string copied;
    for (int pages = 0;; ++pages) {
      ASSERT_LT(pages, 10);
      absl::StatusOr<ReplicationLog::RecordPage> page = walk->Next(1);
      ASSERT_TRUE(page.ok()) << page.status();
      EXPECT_LE(page->records.size(), 1u) << "one record per page at a 1-byte budget";
      for (const auto& [key, value] : page->records) copied += key + "=" + value + " ";
      if (pages == 1) {
        // Written while the walk is under way: not in it.
        ASSERT_TRUE(log_->Append(kShard, 1, Batch({"bb", "f"})).ok());
        ASSERT_TRUE(log_->ApplyThrough(kShard, keys.size() + 1).ok());
      }
      if (page->done) break;
      if (!page->records.empty()) {
        EXPECT_EQ(page->last_key, page->records.back().first);
      }
    }
    EXPECT_EQ(copied, "a=v-a b=v-b c=v-c d=v-d e=v-e ");
    absl::StatusOr<ReplicationLog::RecordPage> later = log_->ReadRecords(kShard, "b", 1 << 20);
    ASSERT_TRUE(later.ok()) << later.status();
    ASSERT_EQ(later->records.size(), 5u) << "a walk begun after them sees them";
    EXPECT_EQ(later->records.front().first, "bb");
    EXPECT_TRUE(later->done);
    walk.reset();
    Close();
  }
}

TEST_F(ReplicationLogTest, AShardSharingItsFamilyIsCopiedRestoredAndDroppedAlone) {
  families_ = 2;  // Shards 0 and 2 share family 0.
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_EQ(data_->shard(0), data_->shard(kShard));
  for (uint32_t shard : {0u, kShard}) {
    for (const char* key : {"a", "b"}) ASSERT_TRUE(log_->Append(shard, 1, Batch({key})).ok());
    ASSERT_TRUE(log_->ApplyThrough(shard, 2).ok());
  }
  ASSERT_TRUE(log_->Append(0, 1, Batch({"z"})).ok());
  ASSERT_TRUE(log_->ApplyThrough(0, 3).ok());

  absl::StatusOr<ReplicationLog::RecordPage> page = log_->ReadRecords(kShard, "", 1 << 20);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_TRUE(page->done);
  const std::vector<std::pair<std::string, std::string>> expected = {{"a", "v-a"}, {"b", "v-b"}};
  EXPECT_EQ(page->records, expected) << "the shard's own records, under their storage keys";
  absl::StatusOr<ReplicationLog::RecordPage> first = log_->ReadRecords(0, "", 1 << 20);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->records.size(), 3u) << "shard 0's a, b and z, and none of shard 2's after them";

  ASSERT_TRUE(log_->BeginRestore(kShard).ok());
  EXPECT_EQ(Record(kShard, "a"), "(none)");
  EXPECT_EQ(Record(0, "a"), "v-a") << "the other shard in the family keeps its records";
  EXPECT_EQ(Record(0, "z"), "v-z");
  ASSERT_TRUE(log_->RestoreRecords(kShard, {{"c", "v-c"}}).ok());
  ASSERT_TRUE(log_->FinishRestore(kShard, {1, 1}).ok());
  EXPECT_EQ(Record(kShard, "c"), "v-c");
  EXPECT_EQ(Record(0, "c"), "(none)");

  // A directory with a family per shard takes the pages as they are.
  families_ = 0;
  Close();
  StoreOptions own;
  own.path = dir_.Sub("own");
  own.shards = 4;
  own.shard_families = 4;
  absl::StatusOr<std::unique_ptr<DataDir>> other = DataDir::Open(own, &drops_);
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<std::unique_ptr<ReplicationLog>> other_log =
      ReplicationLog::Open(other->get(), Durability::kFsync);
  ASSERT_TRUE(other_log.ok()) << other_log.status();
  ASSERT_TRUE((*other_log)->RestoreRecords(kShard, page->records).ok());
  std::string value;
  ASSERT_TRUE(
      (*other)->db()->Get(rocksdb::ReadOptions(), (*other)->shard(kShard), "b", &value).ok());
  EXPECT_EQ(value, "v-b");
}

// Power loss: an fsync-mode append that returned is on disk; a promise is
// on disk in either mode; a buffered log may lose its tail but never has a
// gap.
class ReplicationLogPowerLossTest : public ReplicationLogTest {
 protected:
  void SetUp() override { std::tie(fs_, env_) = test::FaultInjectionFileSystem::Make(); }
  std::shared_ptr<test::FaultInjectionFileSystem> fs_;
};

TEST_F(ReplicationLogPowerLossTest, AcknowledgedAppendsAndPromisesSurvive) {
  for (Durability durability : {Durability::kFsync, Durability::kBuffered}) {
    SCOPED_TRACE(durability == Durability::kFsync ? "fsync" : "buffered");
    ASSERT_NO_FATAL_FAILURE(Open(durability));
    const LogPosition before = log_->Last(kShard);
    constexpr int kAppends = 50;
    for (int i = 0; i < kAppends; ++i) {
      ASSERT_TRUE(log_->Append(kShard, 7, Batch({"k" + std::to_string(i)})).ok());
    }
    ASSERT_TRUE(log_->Promise(kShard + 1, log_->Promised(kShard + 1) + 1).ok());
    const uint64_t promised = log_->Promised(kShard + 1);
    fs_->PowerLoss();
    Close();
    fs_->Restart();
    ASSERT_NO_FATAL_FAILURE(Open(durability));

    const LogPosition after = log_->Last(kShard);
    if (durability == Durability::kFsync) {
      EXPECT_EQ(after, (LogPosition{7, before.seq + kAppends}));
    } else {
      EXPECT_LE(after.seq, before.seq + kAppends);
      std::cout << "buffered power loss: " << (before.seq + kAppends - after.seq) << " of "
                << kAppends << " acknowledged appends lost (the promise after them survived)\n";
    }
    const std::vector<LogEntry> entries = ReadAll();
    ASSERT_EQ(entries.size(), after.seq);
    for (size_t i = 0; i < entries.size(); ++i) EXPECT_EQ(entries[i].seq, i + 1) << "no gap";
    EXPECT_EQ(log_->Promised(kShard + 1), promised);
  }
}

// A follower taking several shards' appends in one call writes them
// unsynced and syncs once (the replicator's Ship): what SyncAppends covered
// survives power loss, and what it did not is not yet on disk.
TEST_F(ReplicationLogPowerLossTest, UnsyncedFollowerAppendsPersistOnlyOnceSynced) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  for (uint32_t shard : {kShard, kShard + 1}) {
    ASSERT_TRUE(log_->AppendAfter(shard, 1, {0, 0}, {Entry(1, 1, {"a"}), Entry(1, 2, {"b"})},
                                  /*sync=*/false)
                    .ok());
  }
  ASSERT_TRUE(log_->SyncAppends().ok());
  // Written after the sync, never synced.
  ASSERT_TRUE(log_->AppendAfter(kShard, 1, {1, 2}, {Entry(1, 3, {"c"})}, /*sync=*/false).ok());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{1, 3})) << "readable before it is synced";
  fs_->PowerLoss();
  Close();
  fs_->Restart();
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  EXPECT_EQ(log_->Last(kShard), (LogPosition{1, 2}));
  EXPECT_EQ(log_->Last(kShard + 1), (LogPosition{1, 2}));
  EXPECT_EQ(Positions(ReadAll()), "1/1 1/2 ");
}

// A leader's appends written unsynced (the replicator's LogSyncLoop syncs
// them in groups): DurableSeq, all a leader counts of its own copy, covers
// only what a sync did, and every entry it covered survives power loss.
TEST_F(ReplicationLogPowerLossTest, DurableSeqCoversOnlyWhatASyncDid) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  auto append = [&](bool sync) {
    absl::StatusOr<std::vector<LogPosition>> appended =
        log_->AppendAll({{kShard, 1, Batch({"k"})}, {kShard + 1, 1, Batch({"k"})}}, sync);
    ASSERT_TRUE(appended.ok()) << appended.status();
  };
  ASSERT_NO_FATAL_FAILURE(append(/*sync=*/true));
  EXPECT_EQ(log_->DurableSeq(kShard), 1u) << "a synced append is durable when it returns";
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(append(/*sync=*/false));
  EXPECT_EQ(log_->Last(kShard), (LogPosition{1, 4}));
  EXPECT_EQ(log_->DurableSeq(kShard), 1u) << "no sync since the unsynced appends";
  ASSERT_TRUE(log_->SyncAppends().ok());
  EXPECT_EQ(log_->DurableSeq(kShard), 4u);
  EXPECT_EQ(log_->DurableSeq(kShard + 1), 4u) << "one sync covers every shard";
  ASSERT_NO_FATAL_FAILURE(append(/*sync=*/false));
  const uint64_t durable = log_->DurableSeq(kShard);
  EXPECT_EQ(durable, 4u);
  EXPECT_EQ(log_->Last(kShard).seq, 5u);

  fs_->PowerLoss();
  Close();
  fs_->Restart();
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  EXPECT_GE(log_->Last(kShard).seq, durable) << "an entry DurableSeq covered was lost";
  EXPECT_EQ(log_->Last(kShard), (LogPosition{1, 4})) << "the unsynced append went with the power";
  EXPECT_EQ(log_->DurableSeq(kShard), 4u);
}

// An append whose entries are all here already, written unsynced by an
// earlier call whose sync has not come (or failed), writes nothing; what
// it acknowledges must still be on disk when it answers.
TEST_F(ReplicationLogPowerLossTest, AnAppendOfEntriesWrittenUnsyncedSyncsThemBeforeItAnswers) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  const std::vector<LogEntry> entries = {Entry(1, 1, {"a"}), Entry(1, 2, {"b"})};
  ASSERT_TRUE(log_->AppendAfter(kShard, 1, {0, 0}, entries, /*sync=*/false).ok());
  EXPECT_EQ(log_->DurableSeq(kShard), 0u);
  ASSERT_TRUE(log_->AppendAfter(kShard, 1, {0, 0}, entries).ok());
  EXPECT_EQ(log_->DurableSeq(kShard), 2u);
  fs_->PowerLoss();
  Close();
  fs_->Restart();
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  EXPECT_EQ(log_->Last(kShard), (LogPosition{1, 2})) << "acknowledged, then lost";
}

// A follower's append that replaces an older epoch's tail: what was known
// durable of the replaced entries says nothing of the new ones.
TEST_F(ReplicationLogPowerLossTest, AReplacedTailIsNotDurableUntilSynced) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  ASSERT_TRUE(log_->AppendAfter(kShard, 1, {0, 0},
                                {Entry(1, 1, {"a"}), Entry(1, 2, {"b"}), Entry(1, 3, {"c"})})
                  .ok());
  EXPECT_EQ(log_->DurableSeq(kShard), 3u);
  ASSERT_TRUE(log_->AppendAfter(kShard, 2, {1, 1}, {Entry(2, 2, {"B"})}, /*sync=*/false).ok());
  EXPECT_EQ(log_->Last(kShard), (LogPosition{2, 2}));
  EXPECT_EQ(log_->DurableSeq(kShard), 1u) << "entry 2 was replaced and is not synced";
  ASSERT_TRUE(log_->SyncAppends().ok());
  EXPECT_EQ(log_->DurableSeq(kShard), 2u);
}

// A node whose process died (no power loss) with appends written but not
// synced finds them at restart, and counts them durable: they must then be
// on disk before that restart serves anything, whatever power does next
// (DataDir's avoid_flush_during_recovery).
TEST_F(ReplicationLogPowerLossTest, EntriesFoundAfterAProcessDiedAreOnDiskWhenCountedDurable) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  ASSERT_TRUE(log_->AppendAll({{kShard, 1, Batch({"a"})}}, /*sync=*/true).ok());
  for (const char* key : {"b", "c", "d"}) {
    ASSERT_TRUE(log_->AppendAll({{kShard, 1, Batch({key})}}, /*sync=*/false).ok());
  }
  ASSERT_EQ(log_->DurableSeq(kShard), 1u);
  // The process dies: what it wrote stays in the page cache, unsynced.
  Close();
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  ASSERT_EQ(log_->Last(kShard), (LogPosition{1, 4})) << "the page cache kept the appends";
  const uint64_t durable = log_->DurableSeq(kShard);
  EXPECT_EQ(durable, 4u) << "a restarted log counts what it found as on disk";

  fs_->PowerLoss();
  Close();
  fs_->Restart();
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  EXPECT_GE(log_->Last(kShard).seq, durable)
      << "an entry counted durable after the restart was lost with the power";
  EXPECT_EQ(Positions(ReadAll()), "1/1 1/2 1/3 1/4 ");
}

TEST_F(ReplicationLogPowerLossTest, InBufferedDurabilityDurableSeqIsTheLastEntry) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kBuffered));
  ASSERT_TRUE(log_->AppendAll({{kShard, 1, Batch({"k"})}}, /*sync=*/false).ok());
  EXPECT_EQ(log_->DurableSeq(kShard), 1u);
}

// After a failed sync the kernel may have dropped the appends' pages, so a
// later sync that succeeds would prove nothing: the log takes no more.
TEST_F(ReplicationLogPowerLossTest, AFailedSyncStopsTheLogTakingAppends) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kFsync));
  ASSERT_TRUE(log_->AppendAll({{kShard, 1, Batch({"a"})}}, /*sync=*/false).ok());
  fs_->FailSyncs();
  EXPECT_FALSE(log_->SyncAppends().ok());
  EXPECT_EQ(log_->DurableSeq(kShard), 0u);
  absl::StatusOr<std::vector<LogPosition>> after =
      log_->AppendAll({{kShard, 1, Batch({"b"})}}, /*sync=*/false);
  ASSERT_FALSE(after.ok());
  EXPECT_TRUE(absl::IsUnavailable(after.status())) << after.status();
  EXPECT_NE(after.status().message().find("an earlier sync of the replication log failed"),
            absl::string_view::npos)
      << after.status();
  const absl::Status follower =
      log_->AppendAfter(kShard + 1, 1, {0, 0}, {Entry(1, 1, {"c"})}, /*sync=*/false);
  EXPECT_TRUE(absl::IsUnavailable(follower)) << follower;
  EXPECT_FALSE(log_->SyncAppends().ok()) << "nor does it sync again";
  EXPECT_EQ(log_->DurableSeq(kShard), 0u);
}

TEST_F(ReplicationLogPowerLossTest, TheJoinedMarkSurvivesInBufferedDurabilityToo) {
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kBuffered));
  ASSERT_TRUE(log_->MarkJoined().ok());
  fs_->PowerLoss();
  Close();
  fs_->Restart();
  ASSERT_NO_FATAL_FAILURE(Open(Durability::kBuffered));
  EXPECT_TRUE(log_->Joined());
}

}  // namespace
}  // namespace dedup::storage
