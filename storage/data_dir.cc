#include "storage/data_dir.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/listener.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "storage/hash_memtable.h"
#include "storage/key_codec.h"
#include "storage/rocks_status.h"
#include "storage/testing/rocksdb_env.h"
#include "storage/ttl_compaction_filter.h"

namespace dedup::storage {
namespace {

constexpr char kShardCountKey[] = "meta:shards";
constexpr char kFormatKey[] = "meta:format";
constexpr char kIdentityKey[] = "meta:identity";
constexpr char kLogFamily[] = "replication-log";
constexpr char kFamiliesKey[] = "meta:families";
// "1": a family per shard. "2": shards grouped into fewer families.
constexpr char kFormatOwnFamilies[] = "1";
constexpr char kFormatGrouped[] = "2";
constexpr char kShardFamilyPrefix[] = "shard-";
constexpr char kGroupFamilyPrefix[] = "group-";

std::string GroupName(uint32_t index) { return absl::StrFormat("group-%04d", index); }
constexpr char kClockMarkKey[] = "meta:clock-mark";

std::string CeilingKey(uint32_t shard) { return absl::StrCat("ceiling:", ShardName(shard)); }

rocksdb::WriteOptions Synced() {
  rocksdb::WriteOptions options;
  options.sync = true;
  return options;
}

// A hash memtable's buckets (8 bytes each, allocated with every memtable):
// about one per record a 16 MiB memtable holds at 150 bytes a record.
constexpr size_t kHashMemtableBuckets = 1 << 16;

rocksdb::ColumnFamilyOptions ShardFamilyOptions(const StoreOptions& options,
                                                const StorageTime* time, CompactionDrops* drops) {
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  rocksdb::ColumnFamilyOptions shard;
  shard.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  shard.compaction_filter_factory = std::make_shared<TtlCompactionFilterFactory>(
      [time] { return time->CompactionNowMs(); }, options.abandoned_grace_ms, drops);
  shard.level_compaction_dynamic_level_bytes = true;
  // Most claims are of new keys: a memtable bloom filter answers "not
  // there" without walking the skip list (a profile showed the walk at a
  // tenth of the server's CPU). Its bits are allocated and zeroed with
  // each memtable, idle or not: 1% of the write buffer (168 KiB) is about
  // 10 bits per record at 150 bytes a record, under 1% false positives,
  // where 5% cost every idle shard 0.8 MiB (bench/shard-memory).
  shard.memtable_whole_key_filtering = true;
  shard.memtable_prefix_bloom_size_ratio = 0.01;
  shard.write_buffer_size = 16ull << 20;
  if (options.hash_memtable) {
    // Buckets of keys that share their first 64 bytes: for most keys, one
    // key each. Iterators over these families ask for total order.
    // Point reads of this memtable rely on RocksDB's default Get, which
    // in-place updates and merge operators (both off here) do not use.
    shard.memtable_factory.reset(NewHashListMemTableFactory(kHashMemtableBuckets));
    shard.prefix_extractor.reset(rocksdb::NewCappedPrefixTransform(64));
  }
  if (options.periodic_compaction_seconds > 0) {
    shard.periodic_compaction_seconds = options.periodic_compaction_seconds;
  }
  return shard;
}

// The log family (storage/replication_log.cc) takes every entry of every
// shard, in the order of their writes: in one sorted list, a node's log
// inserts were its largest memtable cost, each walking a list of all
// shards' entries from the top (bench/RESULTS.md, "The log's memtable").
// Its keys lead with a tag byte and the shard (kLogKeyPrefixBytes), and
// its readers walk one shard's entries at a time: so its memtable is
// hashed by that prefix, an insert goes first in its shard's bucket, and a
// walk sorts that bucket's entries of the shard alone.
constexpr size_t kLogMemtableBuckets = 1 << 14;

rocksdb::ColumnFamilyOptions LogFamilyOptions() {
  rocksdb::ColumnFamilyOptions log;
  log.memtable_factory.reset(
      NewHashListMemTableFactory(kLogMemtableBuckets, /*prefix_walks=*/true));
  log.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kLogKeyPrefixBytes));
  return log;
}

bool UnprotectedClock(const StoreOptions& options) {
  return options.env_for_testing != nullptr && options.env_for_testing->unprotected_clock;
}

}  // namespace

class DataDir::ErrorListener final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* error) override {
    if (error == nullptr || error->ok()) return;
    absl::MutexLock lock(&mu_);
    ++errors_;
    if (error_.ok()) {
      error_ = error->IsNoSpace() ? absl::ResourceExhaustedError(
                                        absl::StrCat("storage out of space: ", error->ToString()))
                                  : FromRocks(*error, "storage background error");
    }
  }
  // The store resumes from a full disk itself (DataDir::Recover, called by
  // the server's storage monitor every stats_interval): RocksDB's own
  // retries would race with it, and DB::Resume answers Busy meanwhile.
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status /*error*/,
                            bool* auto_recovery) override {
    if (auto_recovery != nullptr) *auto_recovery = false;
  }
  absl::Status error() const {
    absl::MutexLock lock(&mu_);
    return error_;
  }

  // How many errors RocksDB has reported. DataDir::Recover clears the error
  // only if none came during DB::Resume: RocksDB notifies the end of its
  // recovery without its lock, so an error raised right after the recovery
  // may be notified before that end, and must not be cleared by it.
  uint64_t errors() const {
    absl::MutexLock lock(&mu_);
    return errors_;
  }
  void ClearUnlessErrorsSince(uint64_t errors) {
    absl::MutexLock lock(&mu_);
    if (errors_ == errors) error_ = absl::OkStatus();
  }

  // Also follows write stalls: the families whose writes RocksDB delays or
  // stops, by their latest notified condition. A family's condition at
  // open is not notified, so one that opens stalled counts from its next
  // change on. RocksDB notifies after the change, from the thread that made
  // it: a stall that a write starts itself (its memtable switch) is seen
  // once that write is through.
  void OnStallConditionsChanged(const rocksdb::WriteStallInfo& info) override {
    absl::MutexLock lock(&stall_mu_);
    if (info.condition.cur == rocksdb::WriteStallCondition::kNormal) {
      stalled_.erase(info.cf_name);
    } else {
      stalled_.insert(info.cf_name);
    }
    any_stalled_.store(!stalled_.empty(), std::memory_order_relaxed);
  }
  bool writes_stalled() const { return any_stalled_.load(std::memory_order_relaxed); }

 private:
  absl::Mutex stall_mu_;
  std::set<std::string> stalled_ ABSL_GUARDED_BY(stall_mu_);
  std::atomic<bool> any_stalled_{false};
  mutable absl::Mutex mu_;
  uint64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

DataDir::DataDir(const StoreOptions& options)
    : options_(options),
      listener_(std::make_shared<ErrorListener>()),
      time_(std::make_unique<StorageTime>(options.clock, options.clock_step_tolerance_ms,
                                          options.clock_step_confirmation_ms,
                                          UnprotectedClock(options))) {}

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const StoreOptions& options,
                                                       CompactionDrops* drops) {
  std::unique_ptr<DataDir> dir(new DataDir(options));
  absl::Status status = dir->OpenDb(drops);
  if (!status.ok()) return status;
  return dir;
}

absl::Status DataDir::OpenDb(CompactionDrops* drops) {
  std::error_code ec;
  std::filesystem::create_directories(options_.path, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create data directory ", options_.path, ": ", ec.message()));
  }
  const bool exists = std::filesystem::exists(std::filesystem::path(options_.path) / "CURRENT", ec);

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = !exists;
  // An existing directory only ever gains the replication-log family: the
  // shard families are the ones it lists.
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 4;
  // Only a skip list takes concurrent inserts, and the log family's
  // memtable is never one.
  db_options.allow_concurrent_memtable_write = false;
  db_options.db_write_buffer_size = 256ull << 20;
  // What a process that died left in the page cache, written but not
  // synced, is flushed at open into synced table files before anything is
  // served. The replication log counts every entry it finds at open as on
  // disk (ReplicationLog::DurableSeq), which is true only with this flush;
  // RocksDB's default, set here so that nobody turns it off unaware.
  db_options.avoid_flush_during_recovery = false;
  db_options.listeners.push_back(listener_);
  statistics_ = rocksdb::CreateDBStatistics();
  statistics_->set_stats_level(rocksdb::StatsLevel::kExceptHistogramOrTimers);
  db_options.statistics = statistics_;
  std::shared_ptr<rocksdb::FileSystem> files = rocksdb::FileSystem::Default();
  if (options_.env_for_testing != nullptr && options_.env_for_testing->env != nullptr) {
    files = options_.env_for_testing->env->GetFileSystem();
  }
  env_ = rocksdb::NewCompositeEnv(WalFence::Wrap(std::move(files), &wal_fence_));
  db_options.env = env_.get();

  const uint32_t shards = options_.shards != 0       ? options_.shards
                          : options_.new_shards != 0 ? options_.new_shards
                                                     : kDefaultShards;
  uint32_t families =
      std::min(options_.shard_families == 0 ? kShardFamilies : options_.shard_families, shards);
  bool grouped = families < shards;
  if (exists) {
    std::vector<std::string> listed;
    absl::Status status =
        FromRocks(rocksdb::DB::ListColumnFamilies(db_options, options_.path, &listed),
                  absl::StrCat("cannot read data directory ", options_.path));
    if (!status.ok()) return status;
    auto count = [&listed](const char* prefix) {
      return static_cast<uint32_t>(std::count_if(
          listed.begin(), listed.end(),
          [prefix](const std::string& name) { return absl::StartsWith(name, prefix); }));
    };
    const uint32_t own = count(kShardFamilyPrefix);
    const uint32_t groups = count(kGroupFamilyPrefix);
    if (own > 0 && groups > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", options_.path, " is damaged: it has both shard families (", own,
          ") and group families (", groups, ")"));
    }
    grouped = groups > 0;
    families = grouped ? groups : own;
  }

  const rocksdb::ColumnFamilyOptions shard_options =
      ShardFamilyOptions(options_, time_.get(), drops);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (uint32_t i = 0; i < families; ++i) {
    descriptors.emplace_back(grouped ? GroupName(i) : ShardName(i), shard_options);
  }
  descriptors.emplace_back(kLogFamily, LogFamilyOptions());
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
  families_.assign(handles.begin() + 1, handles.end() - 1);
  log_ = handles.back();
  shard_count_ = shards;
  absl::Status status = exists ? CheckMeta() : WriteMeta();
  if (!status.ok()) return status;
  prefixes_.resize(shard_count_);
  if (families_.size() < shard_count_) {
    for (uint32_t i = 0; i < shard_count_; ++i) prefixes_[i] = ShardKeyPrefix(i);
  }
  status = LoadTokenCeilings();
  if (!status.ok()) return status;
  return LoadClockMark();
}

std::string DataDir::ShardEnd(uint32_t index) const {
  return prefixes_[index].empty() ? std::string() : ShardKeyPrefix(index + 1);
}

absl::Status DataDir::WriteMeta() {
  const bool grouped = families_.size() < shard_count_;
  rocksdb::WriteBatch batch;
  batch.Put(meta_, kShardCountKey, std::to_string(shard_count_));
  batch.Put(meta_, kFormatKey, grouped ? kFormatGrouped : kFormatOwnFamilies);
  if (grouped) batch.Put(meta_, kFamiliesKey, std::to_string(families_.size()));
  batch.Put(meta_, kIdentityKey, options_.identity);
  return FromRocks(db_->Write(Synced(), &batch), "cannot initialize data directory");
}

absl::Status DataDir::CheckMeta() {
  const uint32_t families = static_cast<uint32_t>(families_.size());
  std::string format;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, kFormatKey, &format);
  if (s.ok() && format != kFormatOwnFamilies && format != kFormatGrouped) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data directory ", options_.path, " has format ", format,
        ", which this dedupd does not know (it knows 1 and 2); a newer dedupd made it"));
  }
  const bool grouped = s.ok() && format == kFormatGrouped;
  std::string stored;
  uint32_t stored_shards = 0;
  s = db_->Get(rocksdb::ReadOptions(), meta_, kShardCountKey, &stored);
  std::string stored_families = std::to_string(families);
  if (grouped) {
    db_->Get(rocksdb::ReadOptions(), meta_, kFamiliesKey, &stored_families).PermitUncheckedError();
  }
  const bool consistent =
      s.ok() && absl::SimpleAtoi(stored, &stored_shards) && stored_shards >= 1 &&
      stored_shards <= kMaxShards && stored_families == std::to_string(families) &&
      (grouped ? families >= 1 && families < stored_shards : families == stored_shards);
  if (!consistent) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", options_.path,
                     " is not a dedupd data directory or is damaged (shard count ",
                     s.ok() ? stored : s.ToString(), ", ", families, grouped ? " group" : " shard",
                     " families)"));
  }
  if (options_.shards != 0 && options_.shards != stored_shards) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data directory ", options_.path, " was created with ", stored_shards, " shards; ",
        options_.shards, " were asked for. The shard count of a data directory cannot change"));
  }
  shard_count_ = stored_shards;
  std::string identity;
  s = db_->Get(rocksdb::ReadOptions(), meta_, kIdentityKey, &identity);
  if (s.ok() && identity != options_.identity) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", options_.path, " was created for ", identity, "; this is ",
                     options_.identity, ". A node only opens the data directory made for it"));
  }
  return absl::OkStatus();
}

absl::Status DataDir::LoadTokenCeilings() {
  for (uint32_t i = 0; i < shard_count(); ++i) {
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
    tokens_.push_back(
        std::make_unique<TokenAllocator>(ceiling, options_.token_block, [this, i](uint64_t next) {
          return PutSynced(CeilingKey(i), std::to_string(next), "cannot persist token ceiling");
        }));
  }
  return absl::OkStatus();
}

absl::Status DataDir::LoadClockMark() {
  std::string stored;
  int64_t mark = 0;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, kClockMarkKey, &stored);
  if (s.ok() && !absl::SimpleAtoi(stored, &mark)) {
    return absl::DataLossError(absl::StrCat("high-water mark of time is damaged: '", stored, "'"));
  }
  if (!s.ok() && !s.IsNotFound()) {
    return FromRocks(s, "cannot read the high-water mark of time");
  }
  time_->Start(mark, [this](int64_t next) {
    return PutSynced(kClockMarkKey, std::to_string(next),
                     "cannot persist the high-water mark of time");
  });
  return absl::OkStatus();
}

absl::Status DataDir::WriteSynced(rocksdb::WriteBatch* batch, absl::string_view what) {
  absl::ReaderMutexLock lock(&synced_writes_mu_);
  return FromRocks(db_->Write(Synced(), batch), what);
}

absl::Status DataDir::PutSynced(absl::string_view key, absl::string_view value,
                                absl::string_view what) {
  rocksdb::WriteBatch batch;
  absl::Status put = FromRocks(batch.Put(meta_, rocksdb::Slice(key.data(), key.size()),
                                         rocksdb::Slice(value.data(), value.size())),
                               what);
  if (!put.ok()) return put;
  return WriteSynced(&batch, what);
}

absl::Status DataDir::BackgroundError() const { return listener_->error(); }

absl::Status DataDir::SyncWal(absl::string_view what) {
  absl::MutexLock lock(&synced_writes_mu_);
  absl::Status fenced = wal_fence_.BeginSync();
  if (!fenced.ok()) return absl::Status(fenced.code(), absl::StrCat(what, ": ", fenced.message()));
  absl::Status synced = FromRocks(db_->SyncWAL(), what);
  wal_fence_.EndSync();
  return synced;
}

absl::Status DataDir::Recover() {
  absl::Status error = BackgroundError();
  if (!absl::IsResourceExhausted(error)) return error;
  const uint64_t errors = listener_->errors();
  absl::Status resumed = FromRocks(db_->Resume(), "storage cannot resume");
  if (!resumed.ok()) return resumed;
  listener_->ClearUnlessErrorsSince(errors);
  // The WAL files whose writes failed stay fenced until RocksDB writes to
  // them again or lets them go (WalFence).
  return BackgroundError();
}

bool DataDir::WritesStalled() const { return listener_->writes_stalled(); }

uint64_t DataDir::WriteStallMicros() const {
  return statistics_->getTickerCount(rocksdb::STALL_MICROS);
}

DataDir::~DataDir() {
  if (db_ == nullptr) return;
  for (rocksdb::ColumnFamilyHandle* handle : families_) {
    db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
  }
  if (log_ != nullptr) db_->DestroyColumnFamilyHandle(log_).PermitUncheckedError();
  if (meta_ != nullptr) db_->DestroyColumnFamilyHandle(meta_).PermitUncheckedError();
  db_->Close().PermitUncheckedError();
  delete db_;
}

}  // namespace dedup::storage
