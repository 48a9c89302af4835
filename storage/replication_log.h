#ifndef DEDUP_STORAGE_REPLICATION_LOG_H_
#define DEDUP_STORAGE_REPLICATION_LOG_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "storage/store.h"

namespace rocksdb {
class WriteBatch;
}  // namespace rocksdb

namespace dedup::storage {

class DataDir;  // storage/data_dir.h: RocksDB stays out of this header.

// Where a replica's log ends, or how far it has applied: the (epoch, seq)
// of an entry (docs/replication.md §1). Ordered by epoch first. {0, 0} is
// the empty log.
struct LogPosition {
  uint64_t epoch = 0;
  uint64_t seq = 0;

  bool operator==(const LogPosition& o) const { return epoch == o.epoch && seq == o.seq; }
  bool operator!=(const LogPosition& o) const { return !(*this == o); }
  bool operator<(const LogPosition& o) const {
    return epoch != o.epoch ? epoch < o.epoch : seq < o.seq;
  }
};

// One entry of a shard's log: what the leader of `epoch` wrote as the
// shard's `seq`-th change. `batch` is the representation of a RocksDB
// WriteBatch (WriteBatch::Data()) whose operations name no column family:
// they are the shard's record puts and deletes, applied to whichever
// family holds the shard on the replica that applies them.
struct LogEntry {
  uint64_t epoch = 0;
  uint64_t seq = 0;
  std::string batch;

  LogPosition position() const { return {epoch, seq}; }
};

// The per-shard replication log of docs/replication.md §2-§4, kept in the
// data directory's "replication-log" column family:
//   - entries, keyed by shard and seq;
//   - per shard, the highest epoch this replica promised to a candidate;
//   - per shard, the position applied to the shard's records, written in
//     the same RocksDB write as the records it applies.
// Appends are synced in fsync durability and written in buffered, like
// the records today; applies are never synced, since the log holds them.
// An append may also be written unsynced and synced later, with others
// (SyncAppends); DurableSeq tells how much of a shard's log a sync has
// covered, which is all a leader may count of its own copy.
//
// It keeps the log's invariants and nothing else: entries of a shard have
// consecutive seqs from the first one kept, epochs never go down along the
// log, nothing below a promised epoch is appended, and nothing applied is
// ever truncated. Who leads, what is committed and when to apply are the
// caller's (the replication layer's) to decide.
//
// Thread-safe; calls on one shard are serialized, calls on different
// shards run in parallel. A shard's mutex is held across its RocksDB
// writes on purpose: it orders the shard's appends and keeps its positions
// equal to what is on disk, and only callers of that shard wait.
class ReplicationLog {
 public:
  // Reads every shard's last entry, applied position and promise from
  // `dir`, which must outlive the log.
  static absl::StatusOr<std::unique_ptr<ReplicationLog>> Open(DataDir* dir, Durability durability);

  ReplicationLog(const ReplicationLog&) = delete;
  ReplicationLog& operator=(const ReplicationLog&) = delete;

  // The last entry of the shard's log ({0, 0} when empty), how far it has
  // been applied, and the highest epoch promised (0: none).
  LogPosition Last(uint32_t shard) const;
  LogPosition Applied(uint32_t shard) const;
  uint64_t Promised(uint32_t shard) const;

  // Whether this data directory has joined its cluster: set once the
  // cluster has been told what the directory holds (a new node's
  // membership, or a replaced volume's shards marked for re-seeding), and
  // kept across restarts, so that a replaced volume whose first start was
  // cut short is still known for one on the next (docs/replication.md §4).
  bool Joined() const;
  // Persists Joined() (synced, in either durability).
  absl::Status MarkJoined();

  // As the leader of `epoch`: appends `batch` as the next entry and
  // returns its position. FAILED_PRECONDITION when `epoch` is below the
  // promised epoch or the last entry's (this replica was fenced).
  absl::StatusOr<LogPosition> Append(uint32_t shard, uint64_t epoch, const std::string& batch);

  // As the leader of several shards at once: appends each batch as the
  // next entry of its shard (`shards` distinct), all in one RocksDB write,
  // so that one sync covers them. Returns the positions in order; on any
  // error nothing is appended. With `sync` false the write is not synced
  // (see AppendAfter): a later SyncAppends makes it durable.
  struct ShardAppend {
    uint32_t shard = 0;
    uint64_t epoch = 0;
    std::string batch;
  };
  absl::StatusOr<std::vector<LogPosition>> AppendAll(const std::vector<ShardAppend>& appends,
                                                     bool sync = true);

  // As a follower of the leader of `leader_epoch`: appends `entries`
  // (consecutive seqs, non-decreasing epochs, none above `leader_epoch`)
  // after the entry at `prev` ({0, 0}: the start of the log).
  //   - FAILED_PRECONDITION (fenced) when `leader_epoch` is below the
  //     promised epoch; entries of older epochs are accepted from a leader
  //     that is not, since a new leader ships the entries it inherited;
  //   - a `leader_epoch` above the promise raises the promise with the
  //     append (written like the entries: a replica that never voted for
  //     that epoch fences nobody that a majority of promises does not);
  //   - ABORTED when the log holds no entry at `prev`: the leader must send
  //     from an earlier entry (Last() tells where this log ends);
  //   - entries after `prev` that this log already holds are kept when
  //     equal and replace the rest of the log from the first that differs
  //     (an uncommitted tail of an older epoch), unless that would remove
  //     an applied entry, which is INTERNAL: it would mean a committed
  //     entry was not on a majority.
  //
  // With `sync` false the append is written but not synced, in either
  // durability; SyncAppends() then syncs it and everything before it, so
  // that a follower taking several shards' appends in one call syncs once.
  absl::Status AppendAfter(uint32_t shard, uint64_t leader_epoch, LogPosition prev,
                           const std::vector<LogEntry>& entries, bool sync = true);
  // AppendAfter for several shards (distinct) at once, in one RocksDB
  // write: what a follower takes from one call of its leader's. One
  // status per append, in order; a shard that fails adds nothing to the
  // write, and a failed write fails every shard that had something in it.
  struct FollowerAppend {
    uint32_t shard = 0;
    uint64_t leader_epoch = 0;
    LogPosition prev;
    absl::Span<const LogEntry> entries;
  };
  std::vector<absl::Status> AppendAfterAll(absl::Span<const FollowerAppend> appends,
                                           bool sync = true);
  // In fsync durability, syncs every write made so far (the WAL); in
  // buffered, nothing. Several threads may call it at once. A failed sync
  // fails every append from then on: after a failed fsync the kernel may
  // have dropped the dirty pages, so a later sync that succeeds proves
  // nothing about the appends before it. Not so a sync refused because a
  // write failed on a full disk (RESOURCE_EXHAUSTED): that one was never
  // attempted, and appends resume once the data directory recovers.
  absl::Status SyncAppends();

  // The seq through which the shard's log is known to be on disk: in
  // fsync durability, Last() less the appends written unsynced that no
  // SyncAppends has covered since (a truncation by a follower's append
  // lowers it too); in buffered, Last(). Never above Last().seq.
  uint64_t DurableSeq(uint32_t shard) const;

  // Persists a promise not to accept entries below `epoch` from now on,
  // and returns the log's last position for the candidate to compare.
  // FAILED_PRECONDITION when `epoch` is not above the promise already made.
  absl::StatusOr<LogPosition> Promise(uint32_t shard, uint64_t epoch);

  // Entries from `from_seq` on, in order, up to about `max_bytes` of
  // batches (at least one entry when there is one).
  absl::StatusOr<std::vector<LogEntry>> Read(uint32_t shard, uint64_t from_seq,
                                             size_t max_bytes) const;

  // Applies the entries after Applied() up to and including `seq` to the
  // shard's records, in RocksDB writes of up to about 1 MiB, each with the
  // applied position it reaches. Entries in `known` (consecutive, as they
  // are in this log: what the caller just appended) are applied as given;
  // the others are read back from the log. OUT_OF_RANGE when the log does
  // not reach `seq`; DATA_LOSS when an entry cannot be read back.
  absl::Status ApplyThrough(uint32_t shard, uint64_t seq, absl::Span<const LogEntry> known = {});
  // ApplyThrough for several shards (distinct) at once, in as few RocksDB
  // writes as their size allows: one for a leader's call that wrote to
  // several shards. One status per apply, in order; a failed write fails
  // every shard it carried.
  struct ShardApply {
    uint32_t shard = 0;
    uint64_t seq = 0;
    absl::Span<const LogEntry> known;
  };
  std::vector<absl::Status> ApplyAll(absl::Span<const ShardApply> applies);

  // Removes entries up to and including `seq`, which must be applied
  // (FAILED_PRECONDITION otherwise).
  absl::Status TrimThrough(uint32_t shard, uint64_t seq);

  // Re-seeding a shard from a copy of another replica's records
  // (docs/replication.md §4).
  //
  // As the source: the shard's stored records in key order, as stored,
  // page by page.
  struct RecordPage {
    std::vector<std::pair<std::string, std::string>> records;
    std::string last_key;  // Pass back as `after_key` for the next page.
    bool done = false;
  };
  // One walk of them, on one RocksDB iterator: every page shows the
  // records as they were when the walk was opened, and a hashed memtable
  // (StoreOptions::hash_memtable) is sorted once for the walk, not once a
  // page (bench/RESULTS.md, "Hashed records on replicated nodes"). Until
  // it is destroyed it holds that view's memtables and table files, so it
  // should live no longer than the copy it serves, and never past the log.
  class RecordWalk {
   public:
    ~RecordWalk();
    // Up to about `max_bytes` of records (one at least, while any is
    // left); `done` on the page that ends the shard.
    absl::StatusOr<RecordPage> Next(size_t max_bytes);

   private:
    friend class ReplicationLog;
    struct Iteration;
    explicit RecordWalk(std::unique_ptr<Iteration> iteration);
    std::unique_ptr<Iteration> iteration_;
  };
  // The records after `after_key` ("" : from the start).
  std::unique_ptr<RecordWalk> WalkRecords(uint32_t shard, const std::string& after_key) const;
  // One page of a walk opened for it alone.
  absl::StatusOr<RecordPage> ReadRecords(uint32_t shard, const std::string& after_key,
                                         size_t max_bytes) const;
  // As the replica re-seeded: drops the shard's records and log (the
  // promise stays), writes `records`, and, with `done`, makes the log
  // continue after `position` as if every entry through it had been
  // applied. A crash in the middle leaves an empty or partial shard whose
  // log is empty: the caller must not let this replica vote until a
  // restore has completed (replicator.h keeps it a learner).
  absl::Status BeginRestore(uint32_t shard);
  absl::Status RestoreRecords(uint32_t shard,
                              const std::vector<std::pair<std::string, std::string>>& records);
  absl::Status FinishRestore(uint32_t shard, LogPosition position);

 private:
  struct ShardLog {
    mutable absl::Mutex mu;
    uint64_t first_seq ABSL_GUARDED_BY(mu) = 1;  // First entry kept.
    LogPosition last ABSL_GUARDED_BY(mu);
    LogPosition applied ABSL_GUARDED_BY(mu);
    uint64_t promised ABSL_GUARDED_BY(mu) = 0;
    // The newest entries, as written: empty, or consecutive entries that
    // end at `last` (kTailEntries and kTailBytes at most). What a leader
    // ships and applies next, and a follower applies next, is mostly here,
    // and is then not read back from RocksDB.
    std::deque<LogEntry> tail ABSL_GUARDED_BY(mu);
    size_t tail_bytes ABSL_GUARDED_BY(mu) = 0;
    // fsync durability: how far the log is known to be on disk, and the
    // unsynced appends after that, oldest first, as (the write's number,
    // the seq the log ended at). DurableSeq moves `durable_seq` past those
    // that a sync has covered.
    mutable uint64_t durable_seq ABSL_GUARDED_BY(mu) = 0;
    mutable std::deque<std::pair<uint64_t, uint64_t>> unsynced ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kTailEntries = 64;
  static constexpr size_t kTailBytes = 64 << 10;

  ReplicationLog(DataDir* dir, Durability durability);
  absl::Status Load(uint32_t shard, ShardLog* log);
  // AppendAfter's checks, and its puts added to `batch`; `*last` is where
  // the log ends once `batch` is written, and `*replaced_from` the first
  // seq it replaces (0: none). Adds nothing on an error.
  absl::Status StageAppendAfter(uint32_t shard, ShardLog& log, uint64_t leader_epoch,
                                LogPosition prev, absl::Span<const LogEntry> entries,
                                rocksdb::WriteBatch* batch, LogPosition* last,
                                uint64_t* replaced_from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);
  // The entry at `seq`, or NOT_FOUND.
  absl::StatusOr<LogEntry> ReadEntry(uint32_t shard, uint64_t seq) const;
  // The tail's entry at `seq`, or null when the tail does not hold it.
  static const LogEntry* InTail(const ShardLog& log, uint64_t seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);
  // Keeps the tail's promise once `entries` (consecutive) were written and
  // the log ends at `log.last`: entries from the first of them on are
  // replaced, and a tail that would not end at `log.last` is dropped.
  static void ExtendTail(ShardLog& log, absl::Span<const LogEntry> entries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);
  static void ClearTail(ShardLog& log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);
  // Notes that the shard's log, now ending at `log.last`, was written:
  // synced, or unsynced as write `number` (NumberUnsyncedWrite).
  // `replaced_from` is the first seq the write replaced (0: none).
  void NoteWritten(ShardLog& log, bool synced, uint64_t number, uint64_t replaced_from = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);
  // A number for an unsynced write that has just returned: a SyncAppends
  // that begins after this covers it.
  uint64_t NumberUnsyncedWrite() { return writes_.fetch_add(1) + 1; }
  // UNAVAILABLE once a sync of the log has failed.
  absl::Status CheckSyncs() const;
  // DurableSeq with the shard's mutex held.
  uint64_t DurableSeqLocked(const ShardLog& log) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu);

  DataDir* const dir_;
  const Durability durability_;
  std::vector<std::unique_ptr<ShardLog>> shards_;
  std::atomic<bool> joined_{false};
  // Unsynced writes numbered so far, and the highest number a finished
  // SyncAppends covered.
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> synced_writes_{0};
  std::atomic<bool> sync_failed_{false};
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_REPLICATION_LOG_H_
