#include "storage/store.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/listener.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "storage/key_codec.h"
#include "storage/lifecycle.h"
#include "storage/record_codec.h"

namespace dedup::storage {
namespace {

constexpr char kShardCountKey[] = "meta:shards";
constexpr char kFormatKey[] = "meta:format";
constexpr char kIdentityKey[] = "meta:identity";
constexpr char kFormat[] = "1";

std::string CeilingKey(uint32_t shard) { return absl::StrCat("ceiling:", ShardName(shard)); }

// The storage layer's one translation of RocksDB status: faults of the
// environment are UNAVAILABLE, so callers retry or fail closed.
absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", s.ToString());
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  return absl::UnavailableError(message);
}

size_t StripeOf(const Operation& op, size_t stripes) {
  // The high half of the hash: the low half picks the shard.
  return static_cast<size_t>(KeyHash(OpNamespace(op), OpKey(op)) >> 32) % stripes;
}

}  // namespace

class Store::ErrorListener final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* error) override {
    absl::MutexLock lock(&mu_);
    if (error_.ok() && error != nullptr && !error->ok()) {
      error_ = FromRocks(*error, "storage background error");
    }
  }
  absl::Status error() const {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

Store::Store(const StoreOptions& options, std::unique_ptr<CompactionDrops> drops)
    : options_(options), drops_(std::move(drops)), listener_(std::make_shared<ErrorListener>()) {}

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
  std::unique_ptr<Store> store(new Store(options, std::make_unique<CompactionDrops>()));
  absl::Status status = store->OpenDb();
  if (!status.ok()) return status;
  if (options.durability == Durability::kBuffered) {
    store->sync_thread_ = std::thread([s = store.get()] { s->SyncLoop(); });
  }
  return store;
}

absl::Status Store::OpenDb() {
  std::error_code ec;
  std::filesystem::create_directories(options_.path, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create data directory ", options_.path, ": ", ec.message()));
  }
  const bool exists = std::filesystem::exists(std::filesystem::path(options_.path) / "CURRENT", ec);

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = !exists;
  db_options.create_missing_column_families = !exists;
  db_options.max_background_jobs = 4;
  db_options.db_write_buffer_size = 256ull << 20;
  db_options.listeners.push_back(listener_);
  if (options_.env != nullptr) db_options.env = options_.env.get();

  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions shard_options;
  shard_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  shard_options.compaction_filter_factory = std::make_shared<TtlCompactionFilterFactory>(
      options_.clock, options_.abandoned_grace_ms, drops_.get());
  shard_options.level_compaction_dynamic_level_bytes = true;
  // Most claims are of new keys: a memtable bloom filter answers "not
  // there" without walking the skip list (a profile showed the walk at a
  // tenth of the server's CPU).
  shard_options.memtable_whole_key_filtering = true;
  shard_options.memtable_prefix_bloom_size_ratio = 0.05;
  shard_options.write_buffer_size = 16ull << 20;
  if (options_.periodic_compaction_seconds > 0) {
    shard_options.periodic_compaction_seconds = options_.periodic_compaction_seconds;
  }

  uint32_t shards = options_.shards == 0 ? kDefaultShards : options_.shards;
  if (exists) {
    std::vector<std::string> families;
    absl::Status listed =
        FromRocks(rocksdb::DB::ListColumnFamilies(db_options, options_.path, &families),
                  absl::StrCat("cannot read data directory ", options_.path));
    if (!listed.ok()) return listed;
    shards = static_cast<uint32_t>(
        std::count_if(families.begin(), families.end(),
                      [](const std::string& f) { return absl::StartsWith(f, "shard-"); }));
  }

  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (uint32_t i = 0; i < shards; ++i) {
    descriptors.emplace_back(ShardName(i), shard_options);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options_.path, descriptors, &handles, &db_);
  if (!s.ok()) {
    if (s.IsIOError() && absl::StrContains(absl::AsciiStrToLower(s.ToString()), "lock")) {
      return absl::FailedPreconditionError(
          absl::StrCat("data directory ", options_.path,
                       " is in use by another dedupd process (its LOCK file is held); "
                       "stop that process or choose another --data_dir"));
    }
    return FromRocks(s, absl::StrCat("cannot open data directory ", options_.path));
  }
  meta_ = handles[0];
  shards_.assign(handles.begin() + 1, handles.end());
  return InitMeta(!exists);
}

absl::Status Store::InitMeta(bool created) {
  rocksdb::WriteOptions synced;
  synced.sync = true;
  const uint32_t shards = shard_count();
  if (created) {
    rocksdb::WriteBatch batch;
    batch.Put(meta_, kShardCountKey, std::to_string(shards));
    batch.Put(meta_, kFormatKey, kFormat);
    batch.Put(meta_, kIdentityKey, options_.identity);
    absl::Status status = FromRocks(db_->Write(synced, &batch), "cannot initialize data directory");
    if (!status.ok()) return status;
  } else {
    std::string stored;
    uint32_t stored_shards = 0;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, kShardCountKey, &stored);
    if (!s.ok() || !absl::SimpleAtoi(stored, &stored_shards) || stored_shards != shards) {
      return absl::FailedPreconditionError(
          absl::StrCat("data directory ", options_.path,
                       " is not a dedupd data directory or is damaged (shard count ",
                       s.ok() ? stored : s.ToString(), ", ", shards, " shard families)"));
    }
    if (options_.shards != 0 && options_.shards != shards) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", options_.path, " was created with ", shards, " shards; ",
          options_.shards, " were asked for. The shard count of a data directory cannot change"));
    }
    std::string identity;
    s = db_->Get(rocksdb::ReadOptions(), meta_, kIdentityKey, &identity);
    if (s.ok() && identity != options_.identity) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", options_.path, " was created for ", identity, "; this is ",
          options_.identity, ". A node only opens the data directory made for it"));
    }
  }
  for (uint32_t i = 0; i < shards; ++i) {
    std::string stored;
    uint64_t ceiling = 0;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, CeilingKey(i), &stored);
    if (s.ok() && !absl::SimpleAtoi(stored, &ceiling)) {
      return absl::DataLossError(
          absl::StrCat("token ceiling of ", ShardName(i), " is damaged: '", stored, "'"));
    }
    if (!s.ok() && !s.IsNotFound()) {
      return FromRocks(s, absl::StrCat("cannot read token ceiling of ", ShardName(i)));
    }
    tokens_.push_back(std::make_unique<TokenAllocator>(
        ceiling, options_.token_block, [this, i, synced](uint64_t next) {
          return FromRocks(db_->Put(synced, meta_, CeilingKey(i), std::to_string(next)),
                           "cannot persist token ceiling");
        }));
  }
  return absl::OkStatus();
}

Store::~Store() {
  if (sync_thread_.joinable()) {
    {
      absl::MutexLock lock(&sync_mu_);
      stopping_ = true;
    }
    sync_thread_.join();
  }
  if (db_ == nullptr) return;
  // After a background error the WAL writer is broken; RocksDB refuses (and
  // in builds with assertions, aborts on) further syncs through it.
  if (listener_->error().ok()) db_->SyncWAL().PermitUncheckedError();
  for (rocksdb::ColumnFamilyHandle* handle : shards_) {
    db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
  }
  if (meta_ != nullptr) db_->DestroyColumnFamilyHandle(meta_).PermitUncheckedError();
  db_->Close().PermitUncheckedError();
  delete db_;
}

void Store::SyncLoop() {
  absl::MutexLock lock(&sync_mu_);
  while (!stopping_) {
    sync_mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                              absl::Milliseconds(options_.buffered_sync_interval_ms));
    if (stopping_) break;
    sync_mu_.Unlock();
    // Failures reach the background-error listener; after one, the store
    // accepts no writes and there is nothing left to sync.
    if (listener_->error().ok()) db_->SyncWAL().PermitUncheckedError();
    sync_mu_.Lock();
  }
}

absl::StatusOr<std::optional<Record>> Store::Read(uint32_t shard, const std::string& storage_key,
                                                  const Operation& op) const {
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), shards_[shard], storage_key, &value);
  if (s.IsNotFound()) return std::optional<Record>();
  if (!s.ok()) return FromRocks(s, "cannot read record");
  Record record;
  if (!DecodeRecord(absl::string_view(value.data(), value.size()), &record)) {
    return absl::DataLossError(
        absl::StrCat("stored record of key in namespace ", OpNamespace(op), " cannot be decoded"));
  }
  record.ns = OpNamespace(op);
  record.key = OpKey(op);
  return std::optional<Record>(std::move(record));
}

std::vector<absl::StatusOr<OpResult>> Store::Apply(absl::Span<const Operation> ops) {
  std::vector<size_t> stripes;
  stripes.reserve(ops.size());
  for (const Operation& op : ops) stripes.push_back(StripeOf(op, kStripes));
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
  // Ascending order, so two batches never wait on each other in a cycle.
  // The locks are held across the write on purpose: the answer to the next
  // operation on a key depends on this one being persisted.
  for (size_t stripe : stripes) stripes_[stripe].Lock();

  const int64_t now_ms = options_.clock->NowMs();
  std::vector<absl::StatusOr<OpResult>> results;
  results.reserve(ops.size());
  // Records written earlier in this batch, by storage key.
  std::unordered_map<std::string, Record> pending;
  rocksdb::WriteBatch batch;
  for (const Operation& op : ops) {
    const std::string storage_key = EncodeStorageKey(OpNamespace(op), OpKey(op));
    const uint32_t shard = ShardOf(OpNamespace(op), OpKey(op), shard_count());
    absl::StatusOr<std::optional<Record>> current;
    if (auto it = pending.find(storage_key); it != pending.end()) {
      current = std::optional<Record>(it->second);
    } else {
      current = Read(shard, storage_key, op);
    }
    if (!current.ok()) {
      results.push_back(current.status());
      continue;
    }
    absl::StatusOr<Transition> t =
        Decide(op, *current, now_ms, [&] { return tokens_[shard]->Next(); });
    if (!t.ok()) {
      results.push_back(t.status());
      continue;
    }
    if (t->write) {
      batch.Put(shards_[shard], storage_key, EncodeRecord(t->stored));
      pending[storage_key] = std::move(t->stored);
    }
    results.push_back(std::move(t->result));
  }

  if (batch.Count() > 0) {
    rocksdb::WriteOptions write_options;
    write_options.sync = options_.durability == Durability::kFsync;
    absl::Status written = FromRocks(db_->Write(write_options, &batch), "cannot persist");
    if (!written.ok()) {
      for (auto& result : results) result = absl::UnavailableError(written.message());
    }
  }
  for (auto it = stripes.rbegin(); it != stripes.rend(); ++it) stripes_[*it].Unlock();
  return results;
}

absl::StatusOr<OpResult> Store::Apply(const Operation& op) {
  return std::move(Apply(absl::MakeConstSpan(&op, 1)).front());
}

absl::StatusOr<ScanPage> Store::Scan(const ScanQuery& query, const ScanCursor& from,
                                     size_t max_records) const {
  ScanPage page;
  page.next = from;
  if (from.done) return page;
  max_records = std::max<size_t>(max_records, 1);
  const int64_t now_ms = options_.clock->NowMs();
  const std::string prefix = NamespacePrefix(query.ns);
  for (uint32_t shard = from.shard; shard < shard_count(); ++shard) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), shards_[shard]));
    const bool resume = shard == from.shard && !from.after.empty();
    it->Seek(resume ? from.after : prefix);
    if (resume && it->Valid() && it->key() == from.after) it->Next();
    for (; it->Valid() && it->key().starts_with(prefix); it->Next()) {
      Record record;
      if (!DecodeRecord(absl::string_view(it->value().data(), it->value().size()), &record)) {
        continue;  // Undecodable records are kept on disk and not reported.
      }
      record.state = EffectiveState(record, now_ms);
      const bool state_matches = query.state == State::kAbsent ? record.state != State::kAbsent
                                                               : record.state == query.state;
      if (!state_matches || now_ms - record.updated_ms < query.min_age_ms) continue;
      DecodeStorageKey(absl::string_view(it->key().data(), it->key().size()), &record.ns,
                       &record.key);
      page.records.push_back(std::move(record));
      if (page.records.size() >= max_records) {
        page.next = ScanCursor{shard, it->key().ToString(), false};
        return page;
      }
    }
    absl::Status status = FromRocks(it->status(), "scan failed");
    if (!status.ok()) return status;
  }
  page.next = ScanCursor{shard_count(), "", true};
  return page;
}

absl::Status Store::CompactAll() {
  rocksdb::CompactRangeOptions options;
  options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  for (rocksdb::ColumnFamilyHandle* shard : shards_) {
    absl::Status status =
        FromRocks(db_->CompactRange(options, shard, nullptr, nullptr), "compaction failed");
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status Store::Flush() {
  absl::Status status = listener_->error();
  if (!status.ok()) return status;
  status = FromRocks(db_->SyncWAL(), "WAL sync failed");
  if (!status.ok()) return status;
  return FromRocks(db_->Flush(rocksdb::FlushOptions(), shards_), "flush failed");
}

absl::Status Store::BackgroundError() const { return listener_->error(); }

const char* StatsStateName(size_t index) {
  static constexpr const char* kNames[] = {"in_progress", "completed", "released", "failed",
                                           "expired"};
  return index < 5 ? kNames[index] : "unknown";
}

StoreStats Store::Stats(size_t sample_per_shard) const {
  StoreStats stats;
  auto property = [this](rocksdb::ColumnFamilyHandle* cf, const char* name) {
    uint64_t value = 0;
    db_->GetIntProperty(cf, name, &value);
    return value;
  };
  const int64_t now_ms = options_.clock->NowMs();
  for (rocksdb::ColumnFamilyHandle* shard : shards_) {
    stats.storage_bytes += property(shard, "rocksdb.total-sst-files-size") +
                           property(shard, "rocksdb.cur-size-all-mem-tables");
    stats.pending_compaction_bytes += property(shard, "rocksdb.estimate-pending-compaction-bytes");
    const uint64_t estimated = property(shard, "rocksdb.estimate-num-keys");
    std::array<uint64_t, 5> sampled = {0, 0, 0, 0, 0};
    uint64_t total = 0;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), shard));
    for (it->SeekToFirst(); it->Valid() && total < sample_per_shard; it->Next()) {
      Record record;
      if (!DecodeRecord(absl::string_view(it->value().data(), it->value().size()), &record)) {
        continue;
      }
      const State state = EffectiveState(record, now_ms);
      const size_t index = state == State::kAbsent ? 4 : static_cast<size_t>(state) - 1;
      ++sampled[index];
      ++total;
    }
    if (total == 0) continue;
    // A small shard is counted exactly; a large one extrapolated.
    const uint64_t population = total < sample_per_shard ? total : std::max(estimated, total);
    for (size_t i = 0; i < sampled.size(); ++i) {
      stats.records_by_state[i] += sampled[i] * population / total;
    }
  }
  stats.write_stalled = property(meta_, "rocksdb.is-write-stopped") != 0 ||
                        property(meta_, "rocksdb.actual-delayed-write-rate") != 0;
  stats.background_error = !listener_->error().ok();
  stats.dropped_completed = drops_->completed.load();
  stats.dropped_failed = drops_->failed.load();
  stats.dropped_abandoned = drops_->abandoned.load();
  return stats;
}

}  // namespace dedup::storage
