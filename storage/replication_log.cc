#include "storage/replication_log.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rocksdb/write_batch.h"
#include "storage/data_dir.h"
#include "storage/rocks_status.h"

namespace dedup::storage {
namespace {

// Keys of the replication-log family. Big-endian numbers, so that a shard's
// entries sort by seq.
constexpr char kEntryTag = 'e';     // e | shard u32 | seq u64 -> entry value
constexpr char kPromiseTag = 'p';   // p | shard u32 -> epoch u64
constexpr char kAppliedTag = 'a';   // a | shard u32 -> epoch u64 | seq u64
constexpr char kJoinedKey[] = "j";  // j -> "" once the directory joined its cluster
constexpr uint8_t kEntryVersion = 1;

void PutBigEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>(value >> (8 * i)));
}

uint64_t GetBigEndian(absl::string_view in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | static_cast<uint8_t>(in[i]);
  return value;
}

absl::string_view View(const rocksdb::Slice& slice) { return {slice.data(), slice.size()}; }

// kLogKeyPrefixBytes (data_dir.h): every key but kJoinedKey starts with
// these, and every walk of the family stays within one of them.
std::string ShardKey(char tag, uint32_t shard) {
  std::string key(1, tag);
  PutBigEndian(&key, shard, 4);
  return key;
}

std::string EntryKey(uint32_t shard, uint64_t seq) {
  std::string key = ShardKey(kEntryTag, shard);
  PutBigEndian(&key, seq, 8);
  return key;
}

std::string EncodeEntry(uint64_t epoch, absl::string_view batch) {
  std::string value(1, static_cast<char>(kEntryVersion));
  PutBigEndian(&value, epoch, 8);
  value.append(batch.data(), batch.size());
  return value;
}

std::string EncodePosition(LogPosition position) {
  std::string value;
  PutBigEndian(&value, position.epoch, 8);
  PutBigEndian(&value, position.seq, 8);
  return value;
}

// Reads of one shard's entries stop at the shard's end: without a bound an
// iterator past the last entry walks every trimmed (range-deleted) entry
// of the shards after it, which a profile showed costing most of a
// replicated leader's CPU.
struct EntryRange {
  explicit EntryRange(uint32_t shard)
      : lower_key(EntryKey(shard, 0)), upper_key(EntryKey(shard, UINT64_MAX)) {
    options.iterate_lower_bound = &lower;
    options.iterate_upper_bound = &upper;
  }
  EntryRange(const EntryRange&) = delete;
  EntryRange& operator=(const EntryRange&) = delete;

  const std::string lower_key, upper_key;
  const rocksdb::Slice lower{lower_key}, upper{upper_key};
  rocksdb::ReadOptions options;
};

// Writes `batch`, synced when `sync` and the durability is fsync
// (DataDir::WriteSynced), else unsynced.
absl::Status Write(DataDir* dir, Durability durability, rocksdb::WriteBatch* batch, bool sync,
                   absl::string_view what) {
  if (sync && durability == Durability::kFsync) return dir->WriteSynced(batch, what);
  return FromRocks(dir->db()->Write(rocksdb::WriteOptions(), batch), what);
}

// Re-targets a logged batch, whose operations name no family and whose
// keys are storage keys, to the shard's family and its keys there. Only
// puts and deletes are ever logged.
class ToShardFamily final : public rocksdb::WriteBatch::Handler {
 public:
  ToShardFamily(const DataDir& dir, uint32_t shard, rocksdb::WriteBatch* out)
      : family_(dir.shard(shard)), prefix_(dir.shard_prefix(shard)), out_(out) {}

  rocksdb::Status PutCF(uint32_t family_id, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) override {
    if (family_id != 0) return rocksdb::Status::Corruption("logged put names a column family");
    if (prefix_.empty()) return out_->Put(family_, key, value);
    return out_->Put(family_, absl::StrCat(prefix_, View(key)), value);
  }
  rocksdb::Status DeleteCF(uint32_t family_id, const rocksdb::Slice& key) override {
    if (family_id != 0) return rocksdb::Status::Corruption("logged delete names a column family");
    if (prefix_.empty()) return out_->Delete(family_, key);
    return out_->Delete(family_, absl::StrCat(prefix_, View(key)));
  }

 private:
  rocksdb::ColumnFamilyHandle* const family_;
  const std::string& prefix_;
  rocksdb::WriteBatch* const out_;
};

// The indices of `items` in ascending order of their `shard`, or nullopt
// when a shard appears twice.
template <typename T>
std::optional<std::vector<size_t>> InShardOrder(absl::Span<const T> items) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return items[a].shard < items[b].shard; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (items[order[i]].shard == items[order[i - 1]].shard) return std::nullopt;
  }
  return order;
}

}  // namespace

ReplicationLog::ReplicationLog(DataDir* dir, Durability durability)
    : dir_(dir), durability_(durability) {}

absl::StatusOr<std::unique_ptr<ReplicationLog>> ReplicationLog::Open(DataDir* dir,
                                                                     Durability durability) {
  std::unique_ptr<ReplicationLog> log(new ReplicationLog(dir, durability));
  for (uint32_t shard = 0; shard < dir->shard_count(); ++shard) {
    log->shards_.push_back(std::make_unique<ShardLog>());
    absl::Status loaded = log->Load(shard, log->shards_.back().get());
    if (!loaded.ok()) return loaded;
  }
  std::string value;
  const rocksdb::Status joined =
      dir->db()->Get(rocksdb::ReadOptions(), dir->log(), kJoinedKey, &value);
  if (!joined.ok() && !joined.IsNotFound()) {
    return FromRocks(joined, "reading whether the data directory joined its cluster");
  }
  log->joined_ = joined.ok();
  return log;
}

absl::Status ReplicationLog::Load(uint32_t shard, ShardLog* log) {
  absl::MutexLock lock(&log->mu);
  rocksdb::DB* db = dir_->db();
  std::string value;
  rocksdb::Status s =
      db->Get(rocksdb::ReadOptions(), dir_->log(), ShardKey(kPromiseTag, shard), &value);
  if (s.ok() && value.size() == 8) {
    log->promised = GetBigEndian(value, 8);
  } else if (!s.IsNotFound()) {
    return s.ok() ? absl::DataLossError(absl::StrCat("shard ", shard, ": bad promise record"))
                  : FromRocks(s, absl::StrCat("reading shard ", shard, "'s promise"));
  }
  s = db->Get(rocksdb::ReadOptions(), dir_->log(), ShardKey(kAppliedTag, shard), &value);
  if (s.ok() && value.size() == 16) {
    log->applied = {GetBigEndian(value, 8), GetBigEndian(absl::string_view(value).substr(8), 8)};
  } else if (!s.IsNotFound()) {
    return s.ok() ? absl::DataLossError(absl::StrCat("shard ", shard, ": bad applied record"))
                  : FromRocks(s, absl::StrCat("reading shard ", shard, "'s applied position"));
  }
  // The log's ends: entries trimmed through the applied position leave the
  // log's end there.
  log->last = log->applied;
  log->first_seq = log->applied.seq + 1;
  const std::string prefix = ShardKey(kEntryTag, shard);
  const EntryRange range(shard);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(range.options, dir_->log()));
  it->Seek(EntryKey(shard, 0));
  if (it->Valid() && it->key().starts_with(prefix)) {
    log->first_seq = GetBigEndian(View(it->key()).substr(5), 8);
    it->SeekToLast();  // The last key below the range's upper bound.
    const absl::string_view entry = View(it->value());
    if (entry.size() < 9 || static_cast<uint8_t>(entry[0]) != kEntryVersion) {
      return absl::DataLossError(absl::StrCat("shard ", shard, ": the last log entry is corrupt"));
    }
    log->last = {GetBigEndian(entry.substr(1), 8), GetBigEndian(View(it->key()).substr(5), 8)};
  }
  log->durable_seq = log->last.seq;
  return FromRocks(it->status(), absl::StrCat("reading shard ", shard, "'s log"));
}

LogPosition ReplicationLog::Last(uint32_t shard) const {
  absl::MutexLock lock(&shards_[shard]->mu);
  return shards_[shard]->last;
}

LogPosition ReplicationLog::Applied(uint32_t shard) const {
  absl::MutexLock lock(&shards_[shard]->mu);
  return shards_[shard]->applied;
}

uint64_t ReplicationLog::Promised(uint32_t shard) const {
  absl::MutexLock lock(&shards_[shard]->mu);
  return shards_[shard]->promised;
}

absl::StatusOr<LogPosition> ReplicationLog::Append(uint32_t shard, uint64_t epoch,
                                                   const std::string& batch) {
  ShardLog& log = *shards_[shard];
  absl::MutexLock lock(&log.mu);
  if (epoch < log.promised || epoch < log.last.epoch) {
    return absl::FailedPreconditionError(absl::StrCat("shard ", shard, ": epoch ", epoch,
                                                      " is fenced (promised ", log.promised,
                                                      ", log at epoch ", log.last.epoch, ")"));
  }
  const LogPosition next{epoch, log.last.seq + 1};
  const std::string what = absl::StrCat("appending to shard ", shard, "'s log");
  rocksdb::WriteBatch entry;
  absl::Status written = CheckSyncs();
  if (written.ok()) {
    written = FromRocks(
        entry.Put(dir_->log(), EntryKey(shard, next.seq), EncodeEntry(epoch, batch)), what);
  }
  if (written.ok()) written = Write(dir_, durability_, &entry, /*sync=*/true, what);
  if (!written.ok()) return written;
  log.last = next;
  NoteWritten(log, /*synced=*/true, 0);
  const LogEntry appended{epoch, next.seq, batch};
  ExtendTail(log, absl::MakeConstSpan(&appended, 1));
  return next;
}

absl::StatusOr<std::vector<LogPosition>> ReplicationLog::AppendAll(
    const std::vector<ShardAppend>& appends, bool sync) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Shards locked in index order, so that two calls never wait on each
  // other in a cycle.
  const std::optional<std::vector<size_t>> ordered =
      InShardOrder(absl::Span<const ShardAppend>(appends));
  if (!ordered.has_value()) return absl::InvalidArgumentError("AppendAll: a shard appears twice");
  const std::vector<size_t>& order = *ordered;
  for (size_t i : order) shards_[appends[i].shard]->mu.Lock();
  std::vector<LogPosition> positions(appends.size());
  absl::Status status = CheckSyncs();
  rocksdb::WriteBatch batch;
  for (size_t i = 0; i < appends.size() && status.ok(); ++i) {
    const ShardAppend& a = appends[i];
    const ShardLog& log = *shards_[a.shard];
    if (a.epoch < log.promised || a.epoch < log.last.epoch) {
      status = absl::FailedPreconditionError(absl::StrCat("shard ", a.shard, ": epoch ", a.epoch,
                                                          " is fenced (promised ", log.promised,
                                                          ", log at epoch ", log.last.epoch, ")"));
      break;
    }
    positions[i] = {a.epoch, log.last.seq + 1};
    batch.Put(dir_->log(), EntryKey(a.shard, positions[i].seq), EncodeEntry(a.epoch, a.batch));
  }
  if (status.ok()) {
    status = Write(dir_, durability_, &batch, sync, "appending to the log");
  }
  if (status.ok()) {
    const uint64_t number = sync ? 0 : NumberUnsyncedWrite();
    for (size_t i = 0; i < appends.size(); ++i) {
      ShardLog& log = *shards_[appends[i].shard];
      log.last = positions[i];
      const LogEntry appended{positions[i].epoch, positions[i].seq, appends[i].batch};
      ExtendTail(log, absl::MakeConstSpan(&appended, 1));
      NoteWritten(log, sync, number);
    }
  }
  for (size_t i : order) shards_[appends[i].shard]->mu.Unlock();
  if (!status.ok()) return status;
  return positions;
}

absl::StatusOr<LogEntry> ReplicationLog::ReadEntry(uint32_t shard, uint64_t seq) const {
  std::string value;
  rocksdb::Status s =
      dir_->db()->Get(rocksdb::ReadOptions(), dir_->log(), EntryKey(shard, seq), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("shard ", shard, ": no log entry ", seq));
  }
  if (!s.ok()) return FromRocks(s, absl::StrCat("reading shard ", shard, "'s log entry ", seq));
  if (value.size() < 9 || static_cast<uint8_t>(value[0]) != kEntryVersion) {
    return absl::DataLossError(absl::StrCat("shard ", shard, ": log entry ", seq, " is corrupt"));
  }
  return LogEntry{GetBigEndian(absl::string_view(value).substr(1), 8), seq, value.substr(9)};
}

const LogEntry* ReplicationLog::InTail(const ShardLog& log, uint64_t seq) {
  if (log.tail.empty() || seq < log.tail.front().seq || seq > log.tail.back().seq) return nullptr;
  return &log.tail[seq - log.tail.front().seq];
}

void ReplicationLog::ExtendTail(ShardLog& log, absl::Span<const LogEntry> entries) {
  // Entries the log already held at the same position were kept as they
  // were (StageAppendAfter), and so are they here.
  while (!entries.empty()) {
    const LogEntry* held = InTail(log, entries.front().seq);
    if (held == nullptr || held->epoch != entries.front().epoch) break;
    entries.remove_prefix(1);
  }
  if (entries.empty()) return;
  if (entries.back().position() != log.last) {
    // The log held more than `entries`, all equal: not worth a read.
    ClearTail(log);
    return;
  }
  while (!log.tail.empty() && log.tail.back().seq >= entries.front().seq) {
    log.tail_bytes -= log.tail.back().batch.size();
    log.tail.pop_back();
  }
  if (!log.tail.empty() && log.tail.back().seq + 1 != entries.front().seq) ClearTail(log);
  for (const LogEntry& entry : entries) {
    log.tail.push_back(entry);
    log.tail_bytes += entry.batch.size();
  }
  while (!log.tail.empty() && (log.tail.size() > kTailEntries || log.tail_bytes > kTailBytes)) {
    log.tail_bytes -= log.tail.front().batch.size();
    log.tail.pop_front();
  }
}

void ReplicationLog::ClearTail(ShardLog& log) {
  log.tail.clear();
  log.tail_bytes = 0;
}

absl::Status ReplicationLog::StageAppendAfter(uint32_t shard, ShardLog& log, uint64_t leader_epoch,
                                              LogPosition prev, absl::Span<const LogEntry> entries,
                                              rocksdb::WriteBatch* batch, LogPosition* last_out,
                                              uint64_t* replaced_from) {
  *replaced_from = 0;
  if (leader_epoch < log.promised) {
    return absl::FailedPreconditionError(absl::StrCat("shard ", shard, ": epoch ", leader_epoch,
                                                      " is fenced (promised ", log.promised, ")"));
  }
  LogPosition expected = prev;
  for (const LogEntry& entry : entries) {
    if (entry.seq != expected.seq + 1 || entry.epoch < expected.epoch ||
        entry.epoch > leader_epoch) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", shard, ": entries must follow ", expected.epoch, "/", expected.seq,
                       " with consecutive seqs and non-decreasing epochs up to ", leader_epoch,
                       ", got ", entry.epoch, "/", entry.seq));
    }
    expected = entry.position();
  }

  // The entry at `prev` must be this log's. Trimmed entries were applied,
  // hence committed, hence the same on every replica.
  if (prev.seq > log.last.seq) {
    return absl::AbortedError(absl::StrCat("shard ", shard, ": the log ends at ", log.last.epoch,
                                           "/", log.last.seq, ", before ", prev.seq));
  }
  if (prev.seq >= log.first_seq) {
    // Most appends follow the log's last entry, whose epoch is known
    // without a read.
    uint64_t epoch_at_prev = log.last.epoch;
    if (const LogEntry* at = InTail(log, prev.seq); prev.seq != log.last.seq && at != nullptr) {
      epoch_at_prev = at->epoch;
    } else if (prev.seq != log.last.seq) {
      absl::StatusOr<LogEntry> read = ReadEntry(shard, prev.seq);
      if (!read.ok()) return read.status();
      epoch_at_prev = read->epoch;
    }
    if (epoch_at_prev != prev.epoch) {
      return absl::AbortedError(absl::StrCat("shard ", shard, ": entry ", prev.seq, " is of epoch ",
                                             epoch_at_prev, ", not ", prev.epoch));
    }
  } else if (prev.seq + 1 < log.first_seq) {
    return absl::AbortedError(absl::StrCat("shard ", shard, ": entries before ", log.first_seq,
                                           " are trimmed; send from there"));
  }

  // What this shard adds to `batch` is taken back if anything below fails.
  batch->SetSavePoint();
  auto fail = [&](absl::Status status) {
    batch->RollbackToSavePoint().PermitUncheckedError();
    return status;
  };
  if (leader_epoch > log.promised) {
    std::string value;
    PutBigEndian(&value, leader_epoch, 8);
    batch->Put(dir_->log(), ShardKey(kPromiseTag, shard), value);
  }
  LogPosition last = log.last;
  bool truncated = false;
  for (const LogEntry& entry : entries) {
    if (!truncated && entry.seq <= log.last.seq) {
      if (entry.seq < log.first_seq) continue;  // Trimmed, hence committed: the same.
      absl::StatusOr<LogEntry> held = ReadEntry(shard, entry.seq);
      if (!held.ok()) return fail(held.status());
      if (held->epoch == entry.epoch) continue;  // Same position, same entry.
      if (entry.seq <= log.applied.seq) {
        return fail(absl::InternalError(
            absl::StrCat("shard ", shard, ": entry ", entry.seq, " was applied at epoch ",
                         held->epoch, " but the leader's is of epoch ", entry.epoch)));
      }
      // An uncommitted tail of an older epoch: replaced from here.
      batch->DeleteRange(dir_->log(), EntryKey(shard, entry.seq),
                         EntryKey(shard, log.last.seq + 1));
      truncated = true;
      *replaced_from = entry.seq;
    }
    batch->Put(dir_->log(), EntryKey(shard, entry.seq), EncodeEntry(entry.epoch, entry.batch));
    last = entry.position();
  }
  batch->PopSavePoint().PermitUncheckedError();
  *last_out = (truncated || log.last < last) ? last : log.last;
  return absl::OkStatus();
}

absl::Status ReplicationLog::AppendAfter(uint32_t shard, uint64_t leader_epoch, LogPosition prev,
                                         const std::vector<LogEntry>& entries, bool sync) {
  std::vector<FollowerAppend> one(1);
  one[0] = {shard, leader_epoch, prev, absl::MakeConstSpan(entries)};
  std::vector<absl::Status> appended = AppendAfterAll(one, sync);
  return appended.front();
}

std::vector<absl::Status> ReplicationLog::AppendAfterAll(absl::Span<const FollowerAppend> appends,
                                                         bool sync) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<absl::Status> results(appends.size());
  // Shards locked in index order, as AppendAll does.
  const std::optional<std::vector<size_t>> ordered = InShardOrder(appends);
  if (!ordered.has_value()) {
    for (absl::Status& result : results) {
      result = absl::InvalidArgumentError("AppendAfterAll: a shard appears twice");
    }
    return results;
  }
  const std::vector<size_t>& order = *ordered;
  for (size_t i : order) shards_[appends[i].shard]->mu.Lock();
  rocksdb::WriteBatch batch;
  std::vector<LogPosition> lasts(appends.size());
  std::vector<uint64_t> replaced_from(appends.size(), 0);
  std::vector<bool> written_to(appends.size(), false);  // Added to `batch`.
  for (size_t i : order) {
    const FollowerAppend& a = appends[i];
    const uint32_t before = batch.Count();
    results[i] = StageAppendAfter(a.shard, *shards_[a.shard], a.leader_epoch, a.prev, a.entries,
                                  &batch, &lasts[i], &replaced_from[i]);
    written_to[i] = batch.Count() > before;
  }
  uint64_t number = 0;
  if (batch.Count() > 0) {
    absl::Status written = CheckSyncs();
    if (written.ok()) {
      written = Write(dir_, durability_, &batch, sync,
                      appends.size() == 1
                          ? absl::StrCat("appending to shard ", appends[0].shard, "'s log")
                          : std::string("appending to several shards' logs"));
    }
    if (written.ok() && !sync) number = NumberUnsyncedWrite();
    if (!written.ok()) {
      // A shard that added nothing (everything it was sent was here) is
      // as it was.
      for (size_t i = 0; i < results.size(); ++i) {
        if (results[i].ok() && written_to[i]) results[i] = written;
      }
    }
  } else if (sync && durability_ == Durability::kFsync) {
    // Nothing to write, all of it here already: perhaps written unsynced
    // by an earlier call whose sync is still to come, or failed. What this
    // call acknowledges must be on disk.
    bool unsynced = false;
    for (size_t i = 0; i < appends.size(); ++i) {
      const ShardLog& log = *shards_[appends[i].shard];
      if (results[i].ok() && DurableSeqLocked(log) < log.last.seq) unsynced = true;
    }
    const absl::Status synced = unsynced ? SyncAppends() : absl::OkStatus();
    for (absl::Status& result : results) {
      if (result.ok()) result = synced;
    }
  }
  for (size_t i : order) {
    ShardLog& log = *shards_[appends[i].shard];
    if (results[i].ok()) {
      log.last = lasts[i];
      log.promised = std::max(log.promised, appends[i].leader_epoch);
      ExtendTail(log, appends[i].entries);
      if (written_to[i]) NoteWritten(log, sync, number, replaced_from[i]);
    }
    log.mu.Unlock();
  }
  return results;
}

bool ReplicationLog::Joined() const { return joined_.load(); }

absl::Status ReplicationLog::MarkJoined() {
  constexpr absl::string_view kWhat = "persisting that the data directory joined its cluster";
  rocksdb::WriteBatch batch;
  absl::Status written = FromRocks(batch.Put(dir_->log(), kJoinedKey, ""), kWhat);
  if (written.ok()) written = dir_->WriteSynced(&batch, kWhat);
  if (written.ok()) joined_ = true;
  return written;
}

absl::StatusOr<LogPosition> ReplicationLog::Promise(uint32_t shard, uint64_t epoch) {
  ShardLog& log = *shards_[shard];
  absl::MutexLock lock(&log.mu);
  if (epoch <= log.promised) {
    return absl::FailedPreconditionError(absl::StrCat("shard ", shard, ": epoch ", log.promised,
                                                      " is already promised; ", epoch,
                                                      " is not above it"));
  }
  std::string value;
  PutBigEndian(&value, epoch, 8);
  // Synced in either durability: a promise forgotten after a power loss
  // could let a fenced leader gather a majority again.
  const std::string what = absl::StrCat("persisting shard ", shard, "'s promise");
  rocksdb::WriteBatch batch;
  absl::Status written =
      FromRocks(batch.Put(dir_->log(), ShardKey(kPromiseTag, shard), value), what);
  if (written.ok()) written = dir_->WriteSynced(&batch, what);
  if (!written.ok()) return written;
  log.promised = epoch;
  return log.last;
}

absl::StatusOr<std::vector<LogEntry>> ReplicationLog::Read(uint32_t shard, uint64_t from_seq,
                                                           size_t max_bytes) const {
  std::vector<LogEntry> entries;
  size_t bytes = 0;
  {
    const ShardLog& log = *shards_[shard];
    absl::MutexLock lock(&log.mu);
    if (!log.tail.empty() && from_seq >= log.tail.front().seq) {
      // From the tail, which ends where the log does. Sizes count as the
      // stored values do: a 9-byte header and the batch.
      for (uint64_t seq = from_seq; seq <= log.tail.back().seq; ++seq) {
        const LogEntry& entry = log.tail[seq - log.tail.front().seq];
        if (!entries.empty() && bytes + 9 + entry.batch.size() > max_bytes) break;
        entries.push_back(entry);
        bytes += 9 + entry.batch.size();
      }
      return entries;
    }
  }
  const std::string prefix = ShardKey(kEntryTag, shard);
  const EntryRange range(shard);
  std::unique_ptr<rocksdb::Iterator> it(dir_->db()->NewIterator(range.options, dir_->log()));
  for (it->Seek(EntryKey(shard, from_seq)); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const absl::string_view value = View(it->value());
    const uint64_t seq = GetBigEndian(View(it->key()).substr(5), 8);
    if (value.size() < 9 || static_cast<uint8_t>(value[0]) != kEntryVersion) {
      return absl::DataLossError(absl::StrCat("shard ", shard, ": log entry ", seq, " is corrupt"));
    }
    if (!entries.empty() && bytes + value.size() > max_bytes) break;
    entries.push_back({GetBigEndian(value.substr(1), 8), seq, std::string(value.substr(9))});
    bytes += value.size();
  }
  absl::Status s = FromRocks(it->status(), absl::StrCat("reading shard ", shard, "'s log"));
  if (!s.ok()) return s;
  return entries;
}

absl::Status ReplicationLog::ApplyThrough(uint32_t shard, uint64_t seq,
                                          absl::Span<const LogEntry> known) {
  return ApplyAll({{shard, seq, known}}).front();
}

std::vector<absl::Status> ReplicationLog::ApplyAll(absl::Span<const ShardApply> applies)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<absl::Status> results(applies.size());
  // Shards locked in index order, as AppendAll does.
  const std::optional<std::vector<size_t>> ordered = InShardOrder(applies);
  if (!ordered.has_value()) {
    for (absl::Status& result : results) {
      result = absl::InvalidArgumentError("ApplyAll: a shard appears twice");
    }
    return results;
  }
  const std::vector<size_t>& order = *ordered;
  for (size_t i : order) shards_[applies[i].shard]->mu.Lock();

  // Entries go to the records in writes of about kApplyBytes, each with
  // the applied position every shard in it reaches, so that a restart
  // resumes after the last whole write.
  constexpr size_t kApplyBytes = 1 << 20;
  rocksdb::WriteBatch apply;
  struct Reached {
    size_t index;  // In `applies`.
    LogPosition position;
  };
  std::vector<Reached> in_batch;
  // Every shard of `in_batch` is locked above, in a loop the analysis
  // cannot follow.
  auto write = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (in_batch.empty()) return;
    for (const Reached& r : in_batch) {
      apply.Put(dir_->log(), ShardKey(kAppliedTag, applies[r.index].shard),
                EncodePosition(r.position));
    }
    const absl::Status written =
        FromRocks(dir_->db()->Write(rocksdb::WriteOptions(), &apply),
                  absl::StrCat("applying shard ", applies[in_batch.front().index].shard,
                               in_batch.size() > 1 ? " and others' logs" : "'s log"));
    for (const Reached& r : in_batch) {
      if (written.ok()) {
        shards_[applies[r.index].shard]->applied = r.position;
      } else if (results[r.index].ok()) {
        results[r.index] = written;
      }
    }
    apply.Clear();
    in_batch.clear();
  };
  for (size_t i : order) {
    const ShardApply& a = applies[i];
    ShardLog& log = *shards_[a.shard];
    if (a.seq > log.last.seq) {
      results[i] = absl::OutOfRangeError(
          absl::StrCat("shard ", a.shard, ": the log ends at ", log.last.seq, ", before ", a.seq));
      continue;
    }
    LogPosition reached = log.applied;
    bool write_failed = false;
    for (uint64_t next = log.applied.seq + 1; next <= a.seq && results[i].ok(); ++next) {
      const LogEntry* entry = nullptr;
      absl::StatusOr<LogEntry> read;
      const absl::Span<const LogEntry> known = a.known;
      if (!known.empty() && next >= known.front().seq && next - known.front().seq < known.size() &&
          known[next - known.front().seq].seq == next) {
        entry = &known[next - known.front().seq];
      } else if (const LogEntry* held = InTail(log, next); held != nullptr) {
        entry = held;
      } else {
        read = ReadEntry(a.shard, next);
        if (!read.ok()) {
          results[i] = read.status().code() == absl::StatusCode::kNotFound
                           ? absl::DataLossError(read.status().message())
                           : read.status();
          break;
        }
        entry = &*read;
      }
      rocksdb::WriteBatch logged(entry->batch);
      ToShardFamily retarget(*dir_, a.shard, &apply);
      apply.SetSavePoint();
      rocksdb::Status s = logged.Iterate(&retarget);
      if (!s.ok()) {
        apply.RollbackToSavePoint().PermitUncheckedError();
        results[i] = absl::DataLossError(absl::StrCat("shard ", a.shard, ": log entry ", next,
                                                      " does not replay: ", s.ToString()));
        break;
      }
      apply.PopSavePoint().PermitUncheckedError();
      reached = entry->position();
      if (apply.GetDataSize() >= kApplyBytes) {
        in_batch.push_back({i, reached});
        write();
        write_failed = !results[i].ok();
      }
    }
    // What this shard reached before an error reading or replaying an
    // entry is written too: those entries are committed and replayed whole.
    if (!write_failed && reached != log.applied) in_batch.push_back({i, reached});
  }
  write();
  for (size_t i : order) shards_[applies[i].shard]->mu.Unlock();
  return results;
}

absl::Status ReplicationLog::TrimThrough(uint32_t shard, uint64_t seq) {
  ShardLog& log = *shards_[shard];
  absl::MutexLock lock(&log.mu);
  if (seq > log.applied.seq) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", shard, ": entry ", seq, " is not applied (applied through ",
                     log.applied.seq, "); only applied entries may be trimmed"));
  }
  if (seq < log.first_seq) return absl::OkStatus();
  absl::Status deleted =
      FromRocks(dir_->db()->DeleteRange(rocksdb::WriteOptions(), dir_->log(),
                                        EntryKey(shard, log.first_seq), EntryKey(shard, seq + 1)),
                absl::StrCat("trimming shard ", shard, "'s log"));
  if (!deleted.ok()) return deleted;
  log.first_seq = seq + 1;
  while (!log.tail.empty() && log.tail.front().seq <= seq) {
    log.tail_bytes -= log.tail.front().batch.size();
    log.tail.pop_front();
  }
  return absl::OkStatus();
}

absl::Status ReplicationLog::BeginRestore(uint32_t shard) {
  ShardLog& log = *shards_[shard];
  absl::MutexLock lock(&log.mu);
  rocksdb::WriteBatch batch;
  // The shard's range of its family. Where the shard has the family to
  // itself, every key sorts below `everything`: keys are encoded
  // namespaces and keys, far shorter than the bound.
  const std::string everything(1024, '\xff');
  const std::string end = dir_->ShardEnd(shard);
  batch.DeleteRange(dir_->shard(shard), dir_->shard_prefix(shard), end.empty() ? everything : end);
  batch.DeleteRange(dir_->log(), EntryKey(shard, 0), EntryKey(shard, UINT64_MAX));
  batch.Delete(dir_->log(), ShardKey(kAppliedTag, shard));
  absl::Status written =
      dir_->WriteSynced(&batch, absl::StrCat("clearing shard ", shard, " to restore it"));
  if (!written.ok()) return written;
  log.last = {};
  log.applied = {};
  log.first_seq = 1;
  ClearTail(log);
  NoteWritten(log, /*synced=*/true, 0);
  return absl::OkStatus();
}

absl::Status ReplicationLog::FinishRestore(uint32_t shard, LogPosition position) {
  ShardLog& log = *shards_[shard];
  absl::MutexLock lock(&log.mu);
  // Synced: a synced write syncs the whole WAL before it, so the restored
  // records are durable with the position.
  const std::string what = absl::StrCat("finishing shard ", shard, "'s restore");
  rocksdb::WriteBatch batch;
  absl::Status written = FromRocks(
      batch.Put(dir_->log(), ShardKey(kAppliedTag, shard), EncodePosition(position)), what);
  if (written.ok()) written = dir_->WriteSynced(&batch, what);
  if (!written.ok()) return written;
  log.applied = position;
  log.last = position;
  log.first_seq = position.seq + 1;
  ClearTail(log);
  NoteWritten(log, /*synced=*/true, 0);
  return absl::OkStatus();
}

}  // namespace dedup::storage
