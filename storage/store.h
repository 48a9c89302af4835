#ifndef DEDUP_STORAGE_STORE_H_
#define DEDUP_STORAGE_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "storage/clock.h"
#include "storage/compaction_drops.h"
#include "storage/operation.h"
#include "storage/record.h"
#include "storage/shard_replicator.h"
#include "storage/store_stats.h"
#include "storage/stripe_locks.h"

namespace rocksdb {
class Snapshot;
}  // namespace rocksdb

namespace dedup::storage {

class DataDir;
class ReplicationLog;
class ShardReplicator;
struct StoreEnvForTesting;

enum class Durability {
  // A write returns only after its WAL record is synced to disk; concurrent
  // writers share one sync (RocksDB group commit).
  kFsync,
  // A write returns once its WAL record is in the operating system's
  // buffers; a background thread syncs periodically. A process crash loses
  // nothing, a machine crash may lose the last interval.
  kBuffered,
};

struct StoreOptions {
  std::string path;
  // Shards of a new data directory. 0: the existing count, or
  // `new_shards` for a new one. A non-zero value that differs from an
  // existing data directory's count is refused.
  uint32_t shards = 0;
  // Shards of a new data directory when `shards` is 0; 0: kDefaultShards.
  // An existing directory keeps its count whatever this says.
  uint32_t new_shards = 0;
  // Column families the shards of a new data directory are spread over.
  // 0: one family per shard up to kShardFamilies shards, and kShardFamilies
  // families for more, since every family costs memory and open time
  // whether or not it holds anything (docs/elastic.md §1). With fewer
  // families than shards, shard s lives in family s mod F with every key
  // prefixed by ShardKeyPrefix(s), so each shard is still one key range
  // that is copied, restored and dropped on its own. An existing data
  // directory keeps the layout it was made with.
  uint32_t shard_families = 0;
  Durability durability = Durability::kFsync;
  // With kFsync: Apply does not sync its write; a thread of the store
  // syncs the WAL once for every AfterSync waiting (a group commit of the
  // store's own). Nothing Apply answered, written or only read, may then be
  // acknowledged before AfterSync's callback has run with OK.
  bool group_sync = false;
  int64_t buffered_sync_interval_ms = 100;
  // How long after its lease ends an abandoned IN_PROGRESS or RELEASED
  // record is kept before compaction may drop it.
  int64_t abandoned_grace_ms = 60 * 60 * 1000;
  // RocksDB periodic compaction: files older than this are recompacted so
  // that expired records in cold files are dropped. 0 disables it.
  uint64_t periodic_compaction_seconds = 24 * 60 * 60;
  // Shard memtables indexed by a hash of each key's first 64 bytes rather
  // than one skip list (the config's `memtable: "hash"`).
  bool hash_memtable = false;
  // Tokens reserved per persisted ceiling (see token_allocator.h).
  uint64_t token_block = 1 << 16;
  // Source of time; must outlive the store. Storage reads it through the
  // rule of storage_time.h, which these two bound (design.md §5, "Clock"):
  // a wall-clock step larger than the tolerance is not followed until the
  // wall clock has stayed ahead for the confirmation period (forward) or
  // has caught up (backward). The tolerance is also how far ahead the
  // persisted high-water mark of time is renewed.
  const Clock* clock = SystemClock::Default();
  int64_t clock_step_tolerance_ms = 1000;
  int64_t clock_step_confirmation_ms = 10 * 60 * 1000;
  // What the data directory is for, e.g. "node 1 of 3". Written when the
  // directory is created; opening it for anything else is refused, so a
  // node never serves shards another node's data directory holds.
  std::string identity = "single node";
  // Test hook, null in production: the RocksDB environment to run on, set
  // through storage/testing/rocksdb_env.h. Opaque here so that nothing
  // outside storage/ sees a RocksDB type.
  std::shared_ptr<const StoreEnvForTesting> env_for_testing;
};

inline constexpr uint32_t kDefaultShards = 16;
inline constexpr uint32_t kShardFamilies = 16;
inline constexpr uint32_t kMaxShards = 16384;

// Where a scan resumes: the shard and the last storage key returned there.
struct ScanCursor {
  uint32_t shard = 0;
  std::string after;  // Empty: the start of the shard's namespace range.
  bool done = false;
};

struct ScanQuery {
  std::string ns;
  State state = State::kAbsent;  // kAbsent: every live state.
  int64_t min_age_ms = 0;        // now - updated_ms must be at least this.
};

struct ScanPage {
  std::vector<Record> records;
  ScanCursor next;
  // Stored values of the namespace met on this page that could not be
  // decoded: kept on disk, not returned, counted in Stats().
  uint64_t undecodable = 0;
};

// The deduplication records of one data directory: RocksDB with one column
// family per shard, lazy expiry on every read, TTL compaction and fencing
// tokens that never go backwards.
//
// Thread-safe: all methods may be called concurrently. Operations on
// different keys proceed in parallel (and share WAL syncs); operations on
// the same key that write are serialized. Without a replicator, one that
// writes nothing is answered from a read while a writer holds its key.
class Store {
 public:
  // Opens or creates the data directory. Errors: FAILED_PRECONDITION when
  // the directory is locked by another process or was created with another
  // shard count; INVALID_ARGUMENT for bad options; UNAVAILABLE for I/O.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options);

  // Stops the background sync, syncs the WAL (unless RocksDB reported a
  // background error, after which it cannot) and closes the database.
  ~Store();

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Applies `ops` in order, each on its own, and answers each in the same
  // position. Operations on the same key see the effects of earlier ones.
  // Every change is persisted (per the durability mode) before this
  // returns, or with group_sync, once AfterSync says so; if persisting
  // fails, every answer is UNAVAILABLE and nothing was acknowledged. A key whose stored record
  // cannot be read back (undecodable, or a corrupt block) answers DATA_LOSS, alone.
  std::vector<absl::StatusOr<OpResult>> Apply(absl::Span<const Operation> ops);
  absl::StatusOr<OpResult> Apply(const Operation& op);
  // As above, and bounds the memory of the answers: once the records
  // answered so far (their keys, owners, fingerprints and results) reach
  // `answer_budget_bytes`, an operation that changes nothing and whose
  // record would go past it answers RESOURCE_EXHAUSTED instead. The first
  // answer always fits; operations that write always answer.
  std::vector<absl::StatusOr<OpResult>> Apply(absl::Span<const Operation> ops,
                                              size_t answer_budget_bytes);

  // Apply without waiting for a replicated cluster's commit: for the thread
  // that read a call, which must not block on followers. Runs `done` with
  // the answers of Apply(ops, answer_budget_bytes), on this thread when
  // nothing is to be committed (or the store is not replicated), else on
  // the replication thread that sees the commit. Returns false, having
  // done nothing, when another call holds a stripe of `ops` now: that call
  // may be waiting for its own commit, so the caller should run Apply
  // where it may wait (a worker).
  using ApplyDone = absl::AnyInvocable<void(std::vector<absl::StatusOr<OpResult>>) &&>;
  bool TryApplyAsync(absl::Span<const Operation> ops, size_t answer_budget_bytes, ApplyDone done);

  // Runs `done` once the WAL is synced through every write that any Apply
  // returned before this call: at once without group_sync (Apply synced
  // it already); with it, on the store's sync thread after the next sync,
  // with that sync's status. A failed sync fails every waiter and, as a
  // failed background sync does, every write from then on.
  void AfterSync(std::function<void(absl::Status)> done);
  // Whether AfterSync waits for a sync (group_sync with kFsync), so that a
  // caller can skip it, and its allocation, where it would not.
  bool SyncsInGroups() const {
    return options_.durability == Durability::kFsync && options_.group_sync;
  }

  // Up to `max_records` (at least one) live records of `query.ns` from
  // `from` on, in shard order, after examining at most `max_examined` (at
  // least one) stored records, matching or not: a page may hold fewer
  // records, even none, and not be done. Pass the returned cursor back to
  // continue until it is done.
  absl::StatusOr<ScanPage> Scan(const ScanQuery& query, const ScanCursor& from, size_t max_records,
                                size_t max_examined = std::numeric_limits<size_t>::max()) const;

  // Compacts every shard fully, running the TTL filter over all records.
  // For tests and operators; periodic compaction does this over time.
  absl::Status CompactAll();

  // Syncs the WAL and flushes memtables.
  absl::Status Flush();

  // Reads RocksDB's estimates. Records by state are extrapolated from the
  // first `sample_per_shard` records of each shard times the shard's
  // estimated key count. Reads, never blocks writers.
  StoreStats Stats(size_t sample_per_shard) const;

  // OK, or why the store accepts no writes: RESOURCE_EXHAUSTED while the
  // disk is full (Recover() may end it), anything else until restart (a
  // RocksDB background error, or a failed background WAL sync). Reads keep
  // working either way.
  absl::Status BackgroundError() const;

  // Whether RocksDB delays or stops writes now, so that a write would wait
  // for a flush or compaction. Cheap: one atomic read.
  bool WritesStalled() const;
  Durability durability() const { return options_.durability; }

  // After RESOURCE_EXHAUSTED, tries to accept writes again (once space has
  // been freed); OK when it does. Other errors are returned unchanged.
  absl::Status Recover();

  // Refuses writes until restart, as after a failed sync of its own: a
  // sync of the WAL that another writer of the data directory made (the
  // replication log) failed with `why`, so what the WAL held may not be
  // on disk. BackgroundError() then names `why`.
  void FailClosed(const absl::Status& why);

  // Calls answered from reads without the stripe locks, because a stripe
  // was busy and nothing was to be written (Apply). For tests and profiles.
  uint64_t answered_without_locks() const { return answered_without_locks_.load(); }

  uint32_t shard_count() const;
  const CompactionDrops& compaction_drops() const { return *drops_; }

  // The shards' replication logs, kept in this data directory
  // (replication_log.h). Open once; the store must outlive it.
  absl::StatusOr<std::unique_ptr<ReplicationLog>> OpenReplicationLog();

  // Makes the store a replica of a replicated cluster: from then on Apply
  // answers only for shards `replicator` says this node leads, takes their
  // tokens from it and commits their writes through it instead of writing
  // the records itself. Call before the first Apply; `replicator` must
  // outlive every Apply.
  void SetReplicator(ShardReplicator* replicator) { replicator_ = replicator; }

  // Storage time now (storage_time.h): what leases and retention are
  // measured in. Never goes backwards, across restarts too.
  int64_t NowMs() const;

 private:
  Store(const StoreOptions& options, std::unique_ptr<CompactionDrops> drops);
  // The record of `op`'s key as of `snapshot` (null: the latest).
  absl::StatusOr<std::optional<Record>> Read(uint32_t shard, const std::string& storage_key,
                                             const Operation& op,
                                             const rocksdb::Snapshot* snapshot = nullptr) const;
  // The answers to `ops` if none of them writes, from reads of one
  // snapshot taken without the stripe locks; nullopt if one would write.
  // For a batch whose stripes are busy: a duplicate of a key another call
  // holds the stripe of is answered without waiting its turn.
  std::optional<std::vector<absl::StatusOr<OpResult>>> AnswerWithoutWriting(
      absl::Span<const Operation> ops, const std::vector<uint64_t>& hashes,
      size_t answer_budget_bytes) const;
  // Apply's steps: what each operation does, under the stripe locks of
  // all of them; the writes a replicated store commits (answers read from
  // a shard this node no longer leads are refused first); and the
  // commit's outcome on the answers.
  struct Decision;
  void DecideAll(absl::Span<const Operation> ops, const std::vector<uint64_t>& hashes,
                 size_t answer_budget_bytes, ShardReplicator* replicator, Decision* decision);
  static std::vector<ShardWrite> Writes(ShardReplicator* replicator, Decision* decision);
  static void TakeCommitted(const std::vector<absl::Status>& committed, Decision* decision);
  void SyncLoop();
  void GroupSyncLoop();
  // One sync of the WAL for a group of waiters, with Sync.
  absl::Status SyncForGroup();
  // Syncs the WAL. A failure other than a full disk's fails the store
  // closed (sync_failed_) until restart; the error names `what`.
  absl::Status Sync(absl::string_view what);

  // Constant after Open.
  const StoreOptions options_;
  const std::unique_ptr<CompactionDrops> drops_;
  std::unique_ptr<DataDir> dir_;

  // Serializes operations on keys of the same stripe.
  StripeLocks stripes_;

  // Null on a single node and in a statically sharded cluster.
  std::atomic<ShardReplicator*> replicator_{nullptr};

  // Reads that met a record they could not decode or a corrupt block.
  // The records the last Stats() sampled (ReadStoreStats).
  mutable absl::Mutex stats_mu_;
  mutable StatsSample stats_sample_ ABSL_GUARDED_BY(stats_mu_);
  mutable std::atomic<uint64_t> corrupt_records_{0};
  std::atomic<uint64_t> answered_without_locks_{0};

  // Background WAL sync (buffered durability).
  mutable absl::Mutex sync_mu_;
  bool stopping_ ABSL_GUARDED_BY(sync_mu_) = false;
  // Set when a background sync failed. The store then refuses writes for
  // good: after a failed fsync the kernel may have dropped the dirty pages,
  // so a later sync that succeeds proves nothing about earlier writes.
  std::atomic<bool> sync_failed_{false};
  absl::Status sync_error_ ABSL_GUARDED_BY(sync_mu_);
  // group_sync: the callers waiting for the next sync.
  std::vector<std::function<void(absl::Status)>> sync_waiters_ ABSL_GUARDED_BY(sync_mu_);
  std::thread sync_thread_;
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_STORE_H_
