#include "storage/hash_memtable.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "tests/common/temp_dir.h"

// The hash-list memtable through RocksDB itself, against a model: point
// reads (with and without snapshots), ordered walks in both directions and
// from any key, what a flush writes, and readers running beside the writer.
// Four buckets and a three-byte prefix put many keys, and every version of
// a key, in each bucket.
namespace dedup::storage {
namespace {

using Model = std::map<std::string, std::string>;  // Live keys only.

// The parameter: every insert takes the walk meant for an entry older than
// one already there (NewHashListMemTableFactoryForTesting).
class HashListMemTableTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { Open(/*prefix_walks=*/false); }

  void Open(bool prefix_walks) {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.memtable_factory.reset(
        NewHashListMemTableFactoryForTesting(4, GetParam(), prefix_walks));
    options.prefix_extractor.reset(prefix_walks ? rocksdb::NewFixedPrefixTransform(3)
                                                : rocksdb::NewCappedPrefixTransform(3));
    options.allow_concurrent_memtable_write = false;
    options.write_buffer_size = 64 << 20;  // Flushed only when a test says so.
    rocksdb::DB* db = nullptr;
    const rocksdb::Status s = rocksdb::DB::Open(options, dir_.Sub("db"), &db);
    ASSERT_TRUE(s.ok()) << s.ToString();
    db_.reset(db);
  }

  void TearDown() override {
    for (const auto& [snapshot, model] : snapshots_) db_->ReleaseSnapshot(snapshot);
    db_.reset();
  }

  static std::string KeyOf(int i) {
    // Shared three-byte prefixes: "ab-", "cd-", "ef-".
    static const char* const kPrefixes[] = {"ab-", "cd-", "ef-"};
    return std::string(kPrefixes[i % 3]) + std::to_string(i);
  }

  // `count` random puts and deletes of 150 keys, applied to the model too.
  void RandomWrites(int count, std::mt19937* random) {
    std::uniform_int_distribution<int> key(0, 149);
    std::uniform_int_distribution<int> action(0, 9);
    for (int n = 0; n < count; ++n) {
      const std::string k = KeyOf(key(*random));
      if (action(*random) == 0) {
        ASSERT_TRUE(db_->Delete(rocksdb::WriteOptions(), k).ok());
        model_.erase(k);
      } else {
        const std::string v = "v" + std::to_string(written_++);
        ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), k, v).ok());
        model_[k] = v;
      }
    }
  }

  void TakeSnapshot() { snapshots_.emplace_back(db_->GetSnapshot(), model_); }

  // `count` random writes, a snapshot, and `count` more.
  void WritesAroundASnapshot(int count, std::mt19937* random) {
    ASSERT_NO_FATAL_FAILURE(RandomWrites(count, random));
    TakeSnapshot();
    ASSERT_NO_FATAL_FAILURE(RandomWrites(count, random));
  }

  // Every key of the key space reads as `model` says, as of `snapshot`.
  void ExpectReads(const Model& model, const rocksdb::Snapshot* snapshot) {
    rocksdb::ReadOptions read;
    read.snapshot = snapshot;
    for (int i = 0; i < 160; ++i) {  // 150 written, 10 never.
      const std::string k = KeyOf(i);
      std::string value;
      const rocksdb::Status s = db_->Get(read, k, &value);
      auto it = model.find(k);
      if (it == model.end()) {
        EXPECT_TRUE(s.IsNotFound()) << k << ": " << s.ToString() << " " << value;
      } else {
        ASSERT_TRUE(s.ok()) << k << ": " << s.ToString();
        EXPECT_EQ(value, it->second) << k;
      }
    }
  }

  // Walks forwards, backwards, and from a seek to every key, against `model`.
  void ExpectWalks(const Model& model, const rocksdb::Snapshot* snapshot) {
    rocksdb::ReadOptions read;
    read.snapshot = snapshot;
    read.total_order_seek = true;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
    std::vector<std::pair<std::string, std::string>> forward, backward;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      forward.emplace_back(it->key().ToString(), it->value().ToString());
    }
    ASSERT_TRUE(it->status().ok()) << it->status().ToString();
    for (it->SeekToLast(); it->Valid(); it->Prev()) {
      backward.emplace_back(it->key().ToString(), it->value().ToString());
    }
    const std::vector<std::pair<std::string, std::string>> expected(model.begin(), model.end());
    EXPECT_EQ(forward, expected);
    std::reverse(backward.begin(), backward.end());
    EXPECT_EQ(backward, expected);
    // Where `it` should be: at `want`, or invalid at the model's end.
    auto expect_at = [&](Model::const_iterator want, const std::string& what) {
      if (want == model.end()) {
        EXPECT_FALSE(it->Valid()) << what;
      } else {
        ASSERT_TRUE(it->Valid()) << what;
        EXPECT_EQ(it->key().ToString(), want->first) << what;
      }
    };
    for (int i = 0; i < 160; ++i) {
      const std::string k = KeyOf(i);
      it->Seek(k);
      expect_at(model.lower_bound(k), "Seek " + k);
      it->SeekForPrev(k);
      auto after = model.upper_bound(k);
      expect_at(after == model.begin() ? model.end() : std::prev(after), "SeekForPrev " + k);
    }
  }

  // The walks a test of this memtable checks: ordered walks of the whole.
  virtual void ExpectAnyWalks(const Model& model, const rocksdb::Snapshot* snapshot) {
    ExpectWalks(model, snapshot);
  }

  void ExpectEverything() {
    ASSERT_NO_FATAL_FAILURE(ExpectReads(model_, nullptr));
    ASSERT_NO_FATAL_FAILURE(ExpectAnyWalks(model_, nullptr));
    for (const auto& [snapshot, model] : snapshots_) {
      ASSERT_NO_FATAL_FAILURE(ExpectReads(model, snapshot));
      ASSERT_NO_FATAL_FAILURE(ExpectAnyWalks(model, snapshot));
    }
  }

  test::TempDir dir_;
  std::unique_ptr<rocksdb::DB> db_;
  Model model_;
  int written_ = 0;
  std::vector<std::pair<const rocksdb::Snapshot*, Model>> snapshots_;
};

TEST_P(HashListMemTableTest, ReadsAndWalksMatchAModelBeforeAndAfterFlushes) {
  std::mt19937 random(20261203);
  ASSERT_NO_FATAL_FAILURE(WritesAroundASnapshot(1500, &random));
  ASSERT_NO_FATAL_FAILURE(ExpectEverything());  // All in the memtable.

  // The flush writes what an ordered walk of the memtable gives.
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectEverything());

  // A new memtable over the flushed file, with a snapshot of each.
  ASSERT_NO_FATAL_FAILURE(WritesAroundASnapshot(1000, &random));
  ASSERT_NO_FATAL_FAILURE(ExpectEverything());
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectEverything());
}

// An ordered walk (and so a flush) sorts entries by eight bytes taken
// after the prefix every key shares: keys that share a long prefix, end in
// zero bytes, are prefixes of each other, hold 0xff bytes or differ only
// past those eight bytes still come out in bytewise order, and each key's
// versions newest first, with and without a snapshot.
TEST_P(HashListMemTableTest, OrderedWalksSortKeysThatShareLongPrefixes) {
  const std::string shared = std::string("tenant-0001", 11) + '\0' + "order-";
  const std::vector<std::string> suffixes = {"",
                                             std::string(1, '\0'),
                                             std::string(2, '\0'),
                                             "a",
                                             std::string("a\0", 2),
                                             std::string("a\0\x01", 3),
                                             "abcdefgh",
                                             std::string("abcdefgh\0", 9),
                                             "abcdefghi",
                                             "abcdefgh\xff",
                                             "\xff",
                                             std::string(8, '\xff') + "\x01",
                                             "1234567",
                                             "12345678",
                                             "123456780",
                                             "12345678z",
                                             "2"};
  std::mt19937 random(20261204);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::string> order = suffixes;
    std::shuffle(order.begin(), order.end(), random);
    for (const std::string& suffix : order) {
      const std::string key = shared + suffix;
      const std::string value = "round " + std::to_string(round);
      ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), key, value).ok());
      model_[key] = value;
    }
    if (round == 1) TakeSnapshot();
  }
  ASSERT_NO_FATAL_FAILURE(ExpectEverything());
  // RocksDB refuses a flush whose input is out of order.
  const rocksdb::Status flushed = db_->Flush(rocksdb::FlushOptions());
  ASSERT_TRUE(flushed.ok()) << flushed.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectEverything());
  for (const auto& [key, value] : model_) {
    std::string read;
    ASSERT_TRUE(db_->Get(rocksdb::ReadOptions(), key, &read).ok()) << key;
    EXPECT_EQ(read, value) << key;
  }
}

// One writer raises each key's value in turn while readers read: a reader
// sees every write acknowledged before its read began, and no value that
// was never written.
TEST_P(HashListMemTableTest, ConcurrentReadersSeeEveryAcknowledgedWrite) {
  constexpr int kKeys = 64;
  constexpr int kRounds = 60;
  constexpr int kReaders = 3;
  std::vector<std::atomic<int>> acknowledged(kKeys);  // Last value acknowledged per key.
  for (auto& a : acknowledged) a.store(-1);
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < kKeys; ++i) {
        if (!db_->Put(rocksdb::WriteOptions(), KeyOf(i), std::to_string(round)).ok()) return;
        acknowledged[i].store(round);
      }
    }
    writing.store(false);
  });
  std::vector<std::string> errors(kReaders);
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 random(t);
      while (writing.load() && errors[t].empty()) {
        const int i = static_cast<int>(random() % kKeys);
        const int before = acknowledged[i].load();
        std::string value;
        const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), KeyOf(i), &value);
        if (s.IsNotFound()) {
          if (before >= 0) errors[t] = KeyOf(i) + " not found after a write was acknowledged";
          continue;
        }
        if (!s.ok()) {
          errors[t] = s.ToString();
        } else if (std::stoi(value) < before || std::stoi(value) >= kRounds) {
          errors[t] = KeyOf(i) + " read " + value + " after " + std::to_string(before);
        }
      }
    });
  }
  writer.join();
  for (std::thread& reader : readers) reader.join();
  EXPECT_FALSE(writing.load()) << "the writer failed";
  for (int t = 0; t < kReaders; ++t) EXPECT_EQ(errors[t], "") << "reader " << t;
  for (int i = 0; i < kKeys; ++i) {
    std::string value;
    ASSERT_TRUE(db_->Get(rocksdb::ReadOptions(), KeyOf(i), &value).ok());
    EXPECT_EQ(value, std::to_string(kRounds - 1));
  }
}

// With prefix walks, as the replication log's family has them: a fixed
// three-byte prefix, one short key outside its domain (as the log's
// "joined" key is), and readers that walk one prefix without asking for
// total order, bounded to it as the log's readers are.
class HashListPrefixWalkTest : public HashListMemTableTest {
 protected:
  void SetUp() override { Open(/*prefix_walks=*/true); }

  // Bounded walks of each prefix, forwards from its start and from a seek
  // to each key, backwards from its end (RocksDB's SeekToLast under an
  // upper bound is a SeekForPrev to it) and from a SeekForPrev to each
  // key, against `model`.
  void ExpectPrefixWalks(const Model& model, const rocksdb::Snapshot* snapshot) {
    for (const std::string prefix : {"ab-", "cd-", "ef-"}) {
      const std::string upper_key = prefix + "\xff";
      const rocksdb::Slice lower(prefix), upper(upper_key);
      rocksdb::ReadOptions read;
      read.snapshot = snapshot;
      read.iterate_lower_bound = &lower;
      read.iterate_upper_bound = &upper;
      Model part;
      for (const auto& [key, value] : model) {
        if (key.compare(0, 3, prefix) == 0) part.emplace(key, value);
      }
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
      std::vector<std::pair<std::string, std::string>> forward, backward;
      for (it->Seek(prefix); it->Valid(); it->Next()) {
        forward.emplace_back(it->key().ToString(), it->value().ToString());
      }
      ASSERT_TRUE(it->status().ok()) << it->status().ToString();
      for (it->SeekToLast(); it->Valid(); it->Prev()) {
        backward.emplace_back(it->key().ToString(), it->value().ToString());
      }
      const std::vector<std::pair<std::string, std::string>> expected(part.begin(), part.end());
      EXPECT_EQ(forward, expected) << prefix;
      std::reverse(backward.begin(), backward.end());
      EXPECT_EQ(backward, expected) << prefix;
      for (int i = 0; i < 160; ++i) {
        const std::string k = KeyOf(i);
        if (k.compare(0, 3, prefix) != 0) continue;
        it->Seek(k);
        auto at = part.lower_bound(k);
        ASSERT_EQ(it->Valid(), at != part.end()) << "Seek " << k;
        if (it->Valid()) {
          EXPECT_EQ(it->key().ToString(), at->first) << "Seek " << k;
        }
        it->SeekForPrev(k);
        auto after = part.upper_bound(k);
        ASSERT_EQ(it->Valid(), after != part.begin()) << "SeekForPrev " << k;
        if (it->Valid()) {
          EXPECT_EQ(it->key().ToString(), std::prev(after)->first) << "SeekForPrev " << k;
        }
      }
    }
  }

  void ExpectAnyWalks(const Model& model, const rocksdb::Snapshot* snapshot) override {
    ExpectPrefixWalks(model, snapshot);
  }

  void ExpectEverythingAndTheKeyOutsideEveryPrefix() {
    ASSERT_NO_FATAL_FAILURE(ExpectEverything());
    std::string joined;
    ASSERT_TRUE(db_->Get(rocksdb::ReadOptions(), "j", &joined).ok());
    EXPECT_EQ(joined, "outside every prefix");
  }
};

TEST_P(HashListPrefixWalkTest, WalksInPrefixModeSeeTheirPrefixInOrder) {
  ASSERT_TRUE(db_->Put(rocksdb::WriteOptions(), "j", "outside every prefix").ok());
  std::mt19937 random(20261206);
  ASSERT_NO_FATAL_FAILURE(WritesAroundASnapshot(1500, &random));
  ASSERT_NO_FATAL_FAILURE(ExpectEverythingAndTheKeyOutsideEveryPrefix());  // All in the memtable.

  // Unbounded, a walk in prefix mode sees only the memtable's entries of
  // its prefix: it sorted that prefix alone.
  std::unique_ptr<rocksdb::Iterator> unbounded(db_->NewIterator(rocksdb::ReadOptions()));
  size_t seen = 0;
  for (unbounded->Seek("cd-"); unbounded->Valid(); unbounded->Next()) {
    ASSERT_EQ(unbounded->key().ToString().substr(0, 3), "cd-");
    ++seen;
  }
  EXPECT_EQ(seen, static_cast<size_t>(std::count_if(model_.begin(), model_.end(), [](auto& kv) {
              return kv.first.compare(0, 3, "cd-") == 0;
            })));
  unbounded.reset();

  // A flush still sorts the whole memtable; walks then merge the file.
  ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions()).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectEverythingAndTheKeyOutsideEveryPrefix());
  ASSERT_NO_FATAL_FAILURE(WritesAroundASnapshot(1000, &random));
  ASSERT_NO_FATAL_FAILURE(ExpectEverythingAndTheKeyOutsideEveryPrefix());
}

INSTANTIATE_TEST_SUITE_P(Inserts, HashListMemTableTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "WalkEveryInsert" : "NewestFirst";
                         });
INSTANTIATE_TEST_SUITE_P(Inserts, HashListPrefixWalkTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "WalkEveryInsert" : "NewestFirst";
                         });

}  // namespace
}  // namespace dedup::storage
