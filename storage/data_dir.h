#ifndef DEDUP_STORAGE_DATA_DIR_H_
#define DEDUP_STORAGE_DATA_DIR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/db.h"
#include "rocksdb/statistics.h"
#include "storage/compaction_drops.h"
#include "storage/storage_time.h"
#include "storage/store.h"
#include "storage/token_allocator.h"
#include "storage/wal_fence.h"

namespace dedup::storage {

// The on-disk format of a data directory. RocksDB with:
//   - the default column family for meta keys: the shard count, the format
//     version, the identity the directory was made for ("node 1 of 3") and
//     each shard's persisted token ceiling and the high-water mark of
//     storage time;
//   - the shards' records, with the TTL compaction filter, either in one
//     column family per shard ("shard-0007", format 1) or, for more shards
//     than families, in StoreOptions::shard_families families
//     ("group-0003", format 2) where shard s lives in family s mod F and
//     every key of it starts with ShardKeyPrefix(s);
//   - "replication-log": the shards' replication logs (replication_log.h),
//     created in a directory that lacks it.
// Opening checks that the directory is the one asked for and refuses any
// other. Internal to storage/: it hands out RocksDB handles.
//
// Thread-safe after Open: the handles are constant and RocksDB is safe for
// concurrent use.
// The prefix of every key of the replication log's family: a tag byte and
// a shard number of four bytes. Its memtable is hashed by it (data_dir.cc).
inline constexpr size_t kLogKeyPrefixBytes = 5;

class DataDir {
 public:
  // Opens or creates the directory at options.path. `drops` receives the
  // TTL filter's counts and must outlive the DataDir. Errors as Store::Open.
  static absl::StatusOr<std::unique_ptr<DataDir>> Open(const StoreOptions& options,
                                                       CompactionDrops* drops);

  // Closes RocksDB without syncing; the store syncs first when it still can.
  ~DataDir();

  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  rocksdb::DB* db() const { return db_; }
  rocksdb::ColumnFamilyHandle* meta() const { return meta_; }
  // The family that holds shard `index`'s records, under the keys
  // RecordKey(index, storage key).
  rocksdb::ColumnFamilyHandle* shard(uint32_t index) const {
    return families_[index % families_.size()];
  }
  // What every key of shard `index` starts with in its family: empty where
  // the shard has a family of its own.
  const std::string& shard_prefix(uint32_t index) const { return prefixes_[index]; }
  // The key in its family of a record of shard `index`: the shard's prefix
  // and the storage key (key_codec.h). Storage keys are what leave the
  // data directory (log entries, record pages, scan cursors), so that
  // replicas with different layouts understand each other.
  std::string RecordKey(uint32_t index, absl::string_view storage_key) const {
    return absl::StrCat(prefixes_[index], storage_key);
  }
  // The first key past shard `index`'s range in its family; empty where the
  // shard has the family to itself.
  std::string ShardEnd(uint32_t index) const;
  // Every family that holds records.
  const std::vector<rocksdb::ColumnFamilyHandle*>& record_families() const { return families_; }
  // The replication log's family (storage/replication_log.cc). Its keys
  // lead with a tag byte and a four-byte shard (kLogKeyPrefixBytes); its
  // readers walk within one such prefix, without total_order_seek.
  rocksdb::ColumnFamilyHandle* log() const { return log_; }
  uint32_t shard_count() const { return shard_count_; }
  // Hands out the fencing tokens of shard `index`, persisting its ceiling
  // in the meta family.
  TokenAllocator* tokens(uint32_t index) const { return tokens_[index].get(); }

  // Storage time, whose high-water mark is persisted in the meta family.
  StorageTime* time() const { return time_.get(); }

  const std::string& path() const { return options_.path; }

  // Whether RocksDB delays or stops writes to any family now (too many
  // memtables or level-0 files waiting for flush or compaction).
  bool WritesStalled() const;

  // Microseconds writers have waited for RocksDB (delayed or stopped
  // writes) since open.
  uint64_t WriteStallMicros() const;

  // OK, or the RocksDB background error in force: RESOURCE_EXHAUSTED when
  // the disk is full, UNAVAILABLE or DATA_LOSS for anything else. While one
  // is in force RocksDB accepts no writes and must not be asked to sync.
  absl::Status BackgroundError() const;

  // Syncs the WAL, every write that returned before the call included,
  // beside writes in flight (DB::SyncWAL). After a failed write to the WAL
  // it syncs nothing and returns that failure: RESOURCE_EXHAUSTED for a
  // full disk, which Recover() can clear, UNAVAILABLE otherwise (WalFence
  // says why). `what` names the sync in an error.
  absl::Status SyncWal(absl::string_view what);

  // A RocksDB write with `sync` set. It never runs beside SyncWal: such a
  // write marks the WAL as syncing, so a SyncWAL beside it waits for it,
  // and if the write's append failed, the write would wait for the SyncWAL
  // in turn (WalFence). Synced writes run beside each other, and RocksDB
  // groups their syncs.
  absl::Status WriteSynced(rocksdb::WriteBatch* batch, absl::string_view what);
  // Writes `key` in the meta family, through WriteSynced.
  absl::Status PutSynced(absl::string_view key, absl::string_view value, absl::string_view what);

  // After a RESOURCE_EXHAUSTED background error, asks RocksDB to resume
  // (DB::Resume flushes the memtables and starts a new WAL); returns OK
  // once writes are accepted again. Any other error is returned as it is:
  // RocksDB cannot resume from it, the process must restart.
  absl::Status Recover();

 private:
  class ErrorListener;

  explicit DataDir(const StoreOptions& options);
  absl::Status OpenDb(CompactionDrops* drops);
  absl::Status WriteMeta();
  absl::Status CheckMeta();
  absl::Status LoadTokenCeilings();
  absl::Status LoadClockMark();

  const StoreOptions options_;
  std::shared_ptr<ErrorListener> listener_;
  // RocksDB runs on a file system that reports failed WAL writes to the
  // fence (wal_fence.h). Both outlive db_.
  WalFence wal_fence_;
  // Held shared by synced writes, exclusively by SyncWal.
  absl::Mutex synced_writes_mu_;
  std::unique_ptr<rocksdb::Env> env_;
  // Made before RocksDB opens (the compaction filter reads it) and started
  // once the stored mark is read.
  const std::unique_ptr<StorageTime> time_;
  // Tickers only (no histograms or timers): the write-stall time.
  std::shared_ptr<rocksdb::Statistics> statistics_;
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;  // The default family.
  uint32_t shard_count_ = 0;
  std::vector<rocksdb::ColumnFamilyHandle*> families_;
  std::vector<std::string> prefixes_;  // Per shard.
  rocksdb::ColumnFamilyHandle* log_ = nullptr;
  std::vector<std::unique_ptr<TokenAllocator>> tokens_;
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_DATA_DIR_H_
