#include "storage/store.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/data_dir.h"
#include "storage/key_codec.h"
#include "storage/lifecycle.h"
#include "storage/record_codec.h"
#include "storage/replication_log.h"
#include "storage/rocks_status.h"
#include "storage/shard_replicator.h"
#include "storage/testing/rocksdb_env.h"
#include "storage/thread_name.h"

namespace dedup::storage {

Store::Store(const StoreOptions& options, std::unique_ptr<CompactionDrops> drops)
    : options_(options), drops_(std::move(drops)) {}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("data directory path is empty");
  }
  if (options.shards > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards must be 1..", kMaxShards, ", got ", options.shards));
  }
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError("clock is null");
  }
  if (options.clock_step_tolerance_ms < 1 || options.clock_step_confirmation_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock step tolerance must be at least 1 ms and confirmation at least 0, got ",
                     options.clock_step_tolerance_ms, " and ", options.clock_step_confirmation_ms));
  }
  std::unique_ptr<Store> store(new Store(options, std::make_unique<CompactionDrops>()));
  absl::StatusOr<std::unique_ptr<DataDir>> dir = DataDir::Open(options, store->drops_.get());
  if (!dir.ok()) return dir.status();
  store->dir_ = std::move(*dir);
  if (options.durability == Durability::kBuffered) {
    store->sync_thread_ = std::thread([s = store.get()] {
      NameThisThread("wal-sync");
      s->SyncLoop();
    });
  } else if (options.group_sync) {
    store->sync_thread_ = std::thread([s = store.get()] {
      NameThisThread("group-sync");
      s->GroupSyncLoop();
    });
  }
  return store;
}

Store::~Store() {
  if (sync_thread_.joinable()) {
    {
      absl::MutexLock lock(&sync_mu_);
      stopping_ = true;
    }
    sync_thread_.join();
  }
  if (dir_ == nullptr) return;
  // A last sync, unless storage has failed: then nothing more is made
  // durable, and the sync would only fail again.
  if (BackgroundError().ok()) dir_->SyncWal("final WAL sync failed").IgnoreError();
}

uint32_t Store::shard_count() const { return dir_->shard_count(); }

absl::StatusOr<std::unique_ptr<ReplicationLog>> Store::OpenReplicationLog() {
  return ReplicationLog::Open(dir_.get(), options_.durability);
}

int64_t Store::NowMs() const { return dir_->time()->NowMs(); }

void Store::SyncLoop() {
  while (true) {
    {
      absl::MutexLock lock(&sync_mu_);
      sync_mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                absl::Milliseconds(options_.buffered_sync_interval_ms));
      if (stopping_) return;
    }
    // After a background error RocksDB accepts no writes: nothing to sync.
    if (!dir_->BackgroundError().ok()) continue;
    if (!Sync("background WAL sync failed").ok() && sync_failed_) return;
  }
}

void Store::AfterSync(std::function<void(absl::Status)> done) {
  if (!SyncsInGroups()) {
    done(absl::OkStatus());
    return;
  }
  {
    absl::MutexLock lock(&sync_mu_);
    if (!stopping_) {
      sync_waiters_.push_back(std::move(done));
      return;
    }
  }
  done(absl::UnavailableError("the store is closing"));
}

void Store::GroupSyncLoop() {
  while (true) {
    std::vector<std::function<void(absl::Status)>> waiting;
    {
      absl::MutexLock lock(&sync_mu_);
      sync_mu_.Await(absl::Condition(
          +[](Store* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->sync_mu_) {
            return s->stopping_ || !s->sync_waiters_.empty();
          },
          this));
      if (sync_waiters_.empty()) return;  // Stopping, and nobody waits.
      waiting.swap(sync_waiters_);
    }
    // Every waiter's writes returned before it was queued, so they are in
    // the WAL this sync covers. Writes that come meanwhile wait for the next.
    const absl::Status synced = SyncForGroup();
    for (auto& done : waiting) done(synced);
  }
}

absl::Status Store::SyncForGroup() {
  absl::Status status = BackgroundError();
  if (!status.ok()) return absl::UnavailableError(status.message());
  if (options_.env_for_testing != nullptr && options_.env_for_testing->unsynced_fsync) {
    return absl::OkStatus();
  }
  absl::Status synced = Sync("WAL sync failed");
  return synced.ok() ? synced : absl::UnavailableError(synced.message());
}

absl::Status Store::Sync(absl::string_view what) {
  absl::Status synced = dir_->SyncWal(what);
  if (synced.ok()) return synced;
  // A write that failed on a full disk: Recover() clears it once space
  // returns.
  if (absl::IsResourceExhausted(synced)) return synced;
  // Anything else fails closed: writes acknowledged from now on might never
  // be durable.
  absl::MutexLock lock(&sync_mu_);
  sync_error_ =
      absl::UnavailableError(absl::StrCat(synced.message(), "; writes are refused until restart"));
  sync_failed_ = true;
  return sync_error_;
}

namespace {

// The key of a record in its family: the storage key itself where the shard
// has the family to itself, without a copy on the claim path; else the
// shard's prefix and the storage key, made in `*scratch`.
const std::string& FamilyKey(const DataDir& dir, uint32_t shard, const std::string& storage_key,
                             std::string* scratch) {
  if (dir.shard_prefix(shard).empty()) return storage_key;
  *scratch = dir.RecordKey(shard, storage_key);
  return *scratch;
}

// OK when `t` can be answered: it did not fail, and the record it answers
// with fits what is left of the batch's answer budget (`*spent` of
// `budget` spent so far), which it then spends. The first answer always
// fits, and so does one that writes. Otherwise, the error to answer.
absl::Status AdmitAnswer(const absl::StatusOr<Transition>& t, size_t budget, size_t* spent) {
  if (!t.ok()) return t.status();
  const Record& answered = t->result.record;
  const size_t bytes = answered.key.size() + answered.owner.size() + answered.fingerprint.size() +
                       answered.result.size();
  if (!t->write && *spent > 0 && bytes > budget - *spent) {
    return absl::ResourceExhaustedError(
        absl::StrCat("answer of this batch is over its budget of ", budget,
                     " bytes of records; ask for this item again in a smaller batch"));
  }
  *spent += std::min(bytes, budget - *spent);
  return absl::OkStatus();
}

// Whether each operation's key hash occurs more than once in the batch:
// only those operations can see, or be seen by, another of the batch.
std::vector<bool> SharedHashes(const std::vector<uint64_t>& hashes) {
  std::vector<bool> shared(hashes.size(), false);
  if (hashes.size() < 2) return shared;
  std::vector<std::pair<uint64_t, size_t>> sorted;
  sorted.reserve(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) sorted.emplace_back(hashes[i], i);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].first != sorted[i - 1].first) continue;
    shared[sorted[i].second] = true;
    shared[sorted[i - 1].second] = true;
  }
  return shared;
}

}  // namespace

absl::StatusOr<std::optional<Record>> Store::Read(uint32_t shard, const std::string& storage_key,
                                                  const Operation& op,
                                                  const rocksdb::Snapshot* snapshot) const {
  rocksdb::PinnableSlice value;
  std::string scratch;
  rocksdb::ReadOptions read_options;
  read_options.snapshot = snapshot;
  rocksdb::Status s = dir_->db()->Get(read_options, dir_->shard(shard),
                                      FamilyKey(*dir_, shard, storage_key, &scratch), &value);
  if (s.IsNotFound()) return std::optional<Record>();
  if (s.IsCorruption()) ++corrupt_records_;
  if (!s.ok()) return FromRocks(s, "cannot read record");
  Record record;
  if (!DecodeRecord(absl::string_view(value.data(), value.size()), &record)) {
    ++corrupt_records_;
    return absl::DataLossError(
        absl::StrCat("stored record of key in namespace ", OpNamespace(op), " cannot be decoded"));
  }
  record.ns = OpNamespace(op);
  record.key = OpKey(op);
  return std::optional<Record>(std::move(record));
}

std::vector<absl::StatusOr<OpResult>> Store::Apply(absl::Span<const Operation> ops) {
  return Apply(ops, std::numeric_limits<size_t>::max());
}

// What one Apply decided under its stripe locks, before anything of it
// is written.
struct Store::Decision {
  std::vector<absl::StatusOr<OpResult>> results;
  std::vector<uint32_t> op_shards;
  // Replicated: whether this node may answer for a shard, asked once per
  // shard of the batch.
  std::map<uint32_t, absl::Status> leading;
  // Single node: one write for the batch. Replicated: one per shard, whose
  // operations name no family (a log entry, shard_replicator.h).
  rocksdb::WriteBatch batch;
  std::map<uint32_t, rocksdb::WriteBatch> shard_batches;
};

namespace {

std::vector<uint64_t> KeyHashes(absl::Span<const Operation> ops) {
  std::vector<uint64_t> hashes;
  hashes.reserve(ops.size());
  for (const Operation& op : ops) hashes.push_back(KeyHash(OpNamespace(op), OpKey(op)));
  return hashes;
}

}  // namespace

std::vector<absl::StatusOr<OpResult>> Store::Apply(absl::Span<const Operation> ops,
                                                   size_t answer_budget_bytes) {
  const std::vector<uint64_t> hashes = KeyHashes(ops);
  // A hot key: while another call holds a stripe of this batch, a batch that
  // writes nothing (duplicates of held or completed keys, queries) is
  // answered from a read now instead of queueing behind it. Replicated
  // stores always lock: their answers also depend on leading the shard.
  if (replicator_.load() == nullptr && stripes_.AnyHeld(hashes)) {
    if (auto answers = AnswerWithoutWriting(ops, hashes, answer_budget_bytes)) {
      answered_without_locks_.fetch_add(1, std::memory_order_relaxed);
      return std::move(*answers);
    }
  }
  // Held across the write on purpose: the answer to the next operation on
  // a key depends on this one being persisted.
  StripeLocks::Guard guard(&stripes_, hashes);
  ShardReplicator* const replicator = replicator_.load();
  Decision decision;
  DecideAll(ops, hashes, answer_budget_bytes, replicator, &decision);
  std::vector<absl::StatusOr<OpResult>>& results = decision.results;

  if (replicator != nullptr) {
    std::vector<ShardWrite> writes = Writes(replicator, &decision);
    if (!writes.empty()) TakeCommitted(replicator->Commit(std::move(writes)), &decision);
    return std::move(results);
  }
  rocksdb::WriteBatch& batch = decision.batch;
  if (batch.Count() > 0 && sync_failed_) {
    const absl::Status refused = BackgroundError();
    for (auto& result : results) result = absl::UnavailableError(refused.message());
  } else if (batch.Count() > 0) {
    const bool sync =
        options_.durability == Durability::kFsync && !options_.group_sync &&
        !(options_.env_for_testing != nullptr && options_.env_for_testing->unsynced_fsync);
    absl::Status written =
        sync ? dir_->WriteSynced(&batch, "cannot persist")
             : FromRocks(dir_->db()->Write(rocksdb::WriteOptions(), &batch), "cannot persist");
    if (!written.ok()) {
      for (auto& result : results) result = absl::UnavailableError(written.message());
    }
  }
  return std::move(results);
}

bool Store::TryApplyAsync(absl::Span<const Operation> ops, size_t answer_budget_bytes,
                          ApplyDone done) {
  ShardReplicator* const replicator = replicator_.load();
  if (replicator == nullptr) {
    std::move(done)(Apply(ops, answer_budget_bytes));
    return true;
  }
  const std::vector<uint64_t> hashes = KeyHashes(ops);
  std::unique_ptr<StripeLocks::Guard> guard = StripeLocks::Guard::TryAcquire(&stripes_, hashes);
  if (guard == nullptr) return false;
  auto decision = std::make_unique<Decision>();
  DecideAll(ops, hashes, answer_budget_bytes, replicator, decision.get());
  std::vector<ShardWrite> writes = Writes(replicator, decision.get());
  if (writes.empty()) {
    guard.reset();
    std::move(done)(std::move(decision->results));
    return true;
  }
  // The stripes stay held until the writes are committed and applied: the
  // answer to the next operation on a key depends on them.
  replicator->CommitAsync(std::move(writes),
                          [decision = std::move(decision), guard = std::move(guard),
                           done = std::move(done)](std::vector<absl::Status> committed) mutable {
                            TakeCommitted(committed, decision.get());
                            guard.reset();
                            std::move(done)(std::move(decision->results));
                          });
  return true;
}

void Store::DecideAll(absl::Span<const Operation> ops, const std::vector<uint64_t>& hashes,
                      size_t answer_budget_bytes, ShardReplicator* replicator, Decision* decision) {
  const int64_t now_ms = dir_->time()->NowMs();
  std::vector<absl::StatusOr<OpResult>>& results = decision->results;
  results.reserve(ops.size());
  std::vector<uint32_t>& op_shards = decision->op_shards;
  op_shards.reserve(ops.size());
  std::map<uint32_t, absl::Status>& leading = decision->leading;
  // Records written earlier in this batch, by storage key, of the keys
  // that occur more than once in it (most batches have none, and skip the
  // map).
  std::unordered_map<std::string, Record> pending;
  const std::vector<bool> shared = SharedHashes(hashes);
  size_t answer_bytes = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Operation& op = ops[i];
    const std::string storage_key = EncodeStorageKey(OpNamespace(op), OpKey(op));
    const uint32_t shard = ShardOfHash(hashes[i], shard_count());
    op_shards.push_back(shard);
    if (replicator != nullptr) {
      auto [it, inserted] = leading.try_emplace(shard);
      if (inserted) it->second = replicator->CheckLeading(shard);
      if (!it->second.ok()) {
        results.push_back(it->second);
        continue;
      }
    }
    absl::StatusOr<std::optional<Record>> current;
    if (auto it = shared[i] ? pending.find(storage_key) : pending.end(); it != pending.end()) {
      current = std::optional<Record>(it->second);
    } else {
      current = Read(shard, storage_key, op);
    }
    if (!current.ok()) {
      results.push_back(current.status());
      continue;
    }
    absl::StatusOr<Transition> t = Decide(op, *current, now_ms, [&]() -> absl::StatusOr<uint64_t> {
      if (replicator != nullptr) return replicator->NextToken(shard);
      return dir_->tokens(shard)->Next();
    });
    if (absl::Status refused = AdmitAnswer(t, answer_budget_bytes, &answer_bytes); !refused.ok()) {
      results.push_back(std::move(refused));
      continue;
    }
    if (t->write) {
      if (replicator != nullptr) {
        decision->shard_batches[shard].Put(storage_key, EncodeRecord(t->stored));
      } else {
        std::string scratch;
        decision->batch.Put(dir_->shard(shard), FamilyKey(*dir_, shard, storage_key, &scratch),
                            EncodeRecord(t->stored));
      }
      if (shared[i]) pending[storage_key] = std::move(t->stored);
    }
    t->result.now_ms = now_ms;
    results.push_back(std::move(t->result));
  }
}

std::vector<ShardWrite> Store::Writes(ShardReplicator* replicator, Decision* decision) {
  // Answers that wrote nothing were read from this replica: they go out
  // only if it still leads (a node paused between the read and now may
  // have been replaced). Commit checks the same for the shards written.
  for (const auto& [shard, was_leading] : decision->leading) {
    if (!was_leading.ok() || decision->shard_batches.count(shard) != 0) continue;
    const absl::Status still = replicator->CheckLeading(shard);
    if (still.ok()) continue;
    for (size_t i = 0; i < decision->results.size(); ++i) {
      if (decision->op_shards[i] == shard && decision->results[i].ok()) {
        decision->results[i] = still;
      }
    }
  }
  std::vector<ShardWrite> writes;
  writes.reserve(decision->shard_batches.size());
  for (auto& [shard, shard_batch] : decision->shard_batches) {
    writes.push_back({shard, shard_batch.Data()});
  }
  return writes;
}

void Store::TakeCommitted(const std::vector<absl::Status>& committed, Decision* decision) {
  size_t w = 0;
  for (const auto& [shard, shard_batch] : decision->shard_batches) {
    const absl::Status& status = committed[w++];
    if (status.ok()) continue;
    // Every answer of the shard: later items may have read the write.
    for (size_t i = 0; i < decision->results.size(); ++i) {
      if (decision->op_shards[i] == shard) decision->results[i] = status;
    }
  }
}

std::optional<std::vector<absl::StatusOr<OpResult>>> Store::AnswerWithoutWriting(
    absl::Span<const Operation> ops, const std::vector<uint64_t>& hashes,
    size_t answer_budget_bytes) const {
  // Safe without the locks because nothing is written: each key's record is
  // read whole, and every write acknowledged before this call is visible to
  // the read (RocksDB makes a write visible before it returns). One
  // snapshot makes a batch's answers of one moment, as they are under the
  // locks. With group sync a read may see a write not yet synced, which is
  // why every answer waits for the sync (AfterSync), read-only ones too.
  rocksdb::DB* const db = dir_->db();
  const rocksdb::Snapshot* const snapshot = ops.size() > 1 ? db->GetSnapshot() : nullptr;
  absl::Cleanup release_snapshot = [db, snapshot] {
    if (snapshot != nullptr) db->ReleaseSnapshot(snapshot);
  };
  // Time is read after the snapshot (or the one read): storage time never
  // goes backwards, so it is no earlier than any write the reads see.
  std::optional<int64_t> now_ms;
  std::vector<absl::StatusOr<OpResult>> results;
  results.reserve(ops.size());
  size_t answer_bytes = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Operation& op = ops[i];
    absl::StatusOr<std::optional<Record>> current =
        Read(ShardOfHash(hashes[i], shard_count()), EncodeStorageKey(OpNamespace(op), OpKey(op)),
             op, snapshot);
    if (!now_ms.has_value()) now_ms = dir_->time()->NowMs();
    if (!current.ok()) {
      results.push_back(current.status());
      continue;
    }
    bool wins = false;
    absl::StatusOr<Transition> t =
        Decide(op, *current, *now_ms, [&wins]() -> absl::StatusOr<uint64_t> {
          wins = true;  // A winning claim writes: it is for the locked path.
          return absl::AbortedError("a winning claim writes");
        });
    if (wins || (t.ok() && t->write)) return std::nullopt;
    if (absl::Status refused = AdmitAnswer(t, answer_budget_bytes, &answer_bytes); !refused.ok()) {
      results.push_back(std::move(refused));
      continue;
    }
    t->result.now_ms = *now_ms;
    results.push_back(std::move(t->result));
  }
  return results;
}

absl::StatusOr<OpResult> Store::Apply(const Operation& op) {
  return std::move(Apply(absl::MakeConstSpan(&op, 1)).front());
}

absl::StatusOr<ScanPage> Store::Scan(const ScanQuery& query, const ScanCursor& from,
                                     size_t max_records, size_t max_examined) const {
  ScanPage page;
  page.next = from;
  if (from.done) return page;
  max_records = std::max<size_t>(max_records, 1);
  max_examined = std::max<size_t>(max_examined, 1);
  size_t examined = 0;
  const int64_t now_ms = dir_->time()->NowMs();
  const std::string ns_prefix = NamespacePrefix(query.ns);
  for (uint32_t shard = from.shard; shard < shard_count(); ++shard) {
    // Keys in the family are the shard's prefix and a storage key; the
    // cursor holds storage keys.
    const std::string prefix = dir_->RecordKey(shard, ns_prefix);
    const size_t shard_prefix = dir_->shard_prefix(shard).size();
    rocksdb::ReadOptions ordered;
    ordered.total_order_seek = true;  // Past a hash memtable's buckets.
    const std::string end = dir_->ShardEnd(shard);
    const rocksdb::Slice upper(end);
    if (!end.empty()) ordered.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(dir_->db()->NewIterator(ordered, dir_->shard(shard)));
    const bool resume = shard == from.shard && !from.after.empty();
    const std::string after = resume ? dir_->RecordKey(shard, from.after) : std::string();
    it->Seek(resume ? after : prefix);
    if (resume && it->Valid() && it->key() == after) it->Next();
    std::string last_examined;  // In this shard; empty: none yet.
    for (; it->Valid() && it->key().starts_with(prefix); it->Next()) {
      const absl::string_view storage_key(it->key().data() + shard_prefix,
                                          it->key().size() - shard_prefix);
      if (examined == max_examined) {
        // Yields before this key, so that one page costs a bounded walk
        // however few records match; the cursor resumes here.
        page.next = ScanCursor{shard, std::move(last_examined), false};
        return page;
      }
      ++examined;
      last_examined = std::string(storage_key);
      Record record;
      if (!DecodeRecord(absl::string_view(it->value().data(), it->value().size()), &record)) {
        // Kept on disk (compaction keeps it too), not returned, counted.
        ++page.undecodable;
        ++corrupt_records_;
        continue;
      }
      record.state = EffectiveState(record, now_ms);
      const bool state_matches = query.state == State::kAbsent ? record.state != State::kAbsent
                                                               : record.state == query.state;
      if (!state_matches || now_ms - record.updated_ms < query.min_age_ms) continue;
      DecodeStorageKey(storage_key, &record.ns, &record.key);
      page.records.push_back(std::move(record));
      if (page.records.size() >= max_records) {
        page.next = ScanCursor{shard, std::string(storage_key), false};
        return page;
      }
    }
    if (it->status().IsCorruption()) ++corrupt_records_;
    absl::Status status = FromRocks(it->status(), "scan failed");
    if (!status.ok()) return status;
  }
  page.next = ScanCursor{shard_count(), "", true};
  return page;
}

absl::Status Store::CompactAll() {
  // Renews the high-water mark, which bounds the filter's time.
  dir_->time()->NowMs();
  rocksdb::CompactRangeOptions options;
  options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  for (rocksdb::ColumnFamilyHandle* family : dir_->record_families()) {
    absl::Status status =
        FromRocks(dir_->db()->CompactRange(options, family, nullptr, nullptr), "compaction failed");
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status Store::Flush() {
  absl::Status status = dir_->BackgroundError();
  if (!status.ok()) return status;
  status = dir_->SyncWal("WAL sync failed");
  if (!status.ok()) return status;
  return FromRocks(dir_->db()->Flush(rocksdb::FlushOptions(), dir_->record_families()),
                   "flush failed");
}

bool Store::WritesStalled() const { return dir_->WritesStalled(); }

absl::Status Store::BackgroundError() const {
  if (sync_failed_) {
    absl::MutexLock lock(&sync_mu_);
    return sync_error_;
  }
  return dir_->BackgroundError();
}

absl::Status Store::Recover() {
  if (sync_failed_) return BackgroundError();
  return dir_->Recover();
}

void Store::FailClosed(const absl::Status& why) {
  absl::MutexLock lock(&sync_mu_);
  if (sync_failed_) return;
  sync_error_ =
      absl::UnavailableError(absl::StrCat(why.message(), "; writes are refused until restart"));
  sync_failed_ = true;
}

StoreStats Store::Stats(size_t sample_per_shard) const {
  StoreStats stats;
  {
    absl::MutexLock lock(&stats_mu_);
    stats = ReadStoreStats(*dir_, *drops_, dir_->time()->NowMs(), sample_per_shard, &stats_sample_);
  }
  stats.background_error = !BackgroundError().ok();
  stats.corrupt_records = corrupt_records_.load();
  stats.clock_forward_step_readings = dir_->time()->forward_step_readings();
  stats.clock_backward_step_readings = dir_->time()->backward_step_readings();
  return stats;
}

}  // namespace dedup::storage
