#include "storage/store_stats.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <memory>

#include "rocksdb/db.h"
#include "storage/data_dir.h"
#include "storage/record_codec.h"

namespace dedup::storage {
namespace {

// The order of StoreStats::records_by_state.
struct StatsRow {
  State state;
  const char* name;
};
constexpr std::array<StatsRow, kCorruptStatsIndex> kStatsRows = {{
    {State::kInProgress, "in_progress"},
    {State::kCompleted, "completed"},
    {State::kReleased, "released"},
    {State::kFailed, "failed"},
    {State::kAbsent, "expired"},
}};

uint64_t IntProperty(const DataDir& dir, rocksdb::ColumnFamilyHandle* family, const char* name) {
  uint64_t value = 0;
  dir.db()->GetIntProperty(family, name, &value);
  return value;
}

}  // namespace

size_t StatsIndex(State state) {
  for (size_t i = 0; i < kStatsRows.size(); ++i) {
    if (kStatsRows[i].state == state) return i;
  }
  return StatsIndex(State::kAbsent);
}

const char* StatsStateName(size_t index) {
  if (index == kCorruptStatsIndex) return "corrupt";
  return index < kStatsRows.size() ? kStatsRows[index].name : "unknown";
}

StoreStats ReadStoreStats(const DataDir& dir, const CompactionDrops& drops, int64_t now_ms,
                          size_t sample_per_shard, StatsSample* sample) {
  StoreStats stats;
  const std::vector<rocksdb::ColumnFamilyHandle*>& families = dir.record_families();
  StatsSample fresh;
  StatsSample* taken = sample != nullptr ? sample : &fresh;
  taken->families.resize(families.size());
  // Per family: where shards share one, its sample covers them together.
  for (size_t f = 0; f < families.size(); ++f) {
    rocksdb::ColumnFamilyHandle* shard = families[f];
    stats.storage_bytes += IntProperty(dir, shard, "rocksdb.total-sst-files-size") +
                           IntProperty(dir, shard, "rocksdb.cur-size-all-mem-tables");
    stats.pending_compaction_bytes +=
        IntProperty(dir, shard, "rocksdb.estimate-pending-compaction-bytes");
    const uint64_t estimated = IntProperty(dir, shard, "rocksdb.estimate-num-keys");
    StatsSample::Family& family = taken->families[f];
    const uint64_t super_version = IntProperty(dir, shard, "rocksdb.current-super-version-number");
    const uint64_t active_entries = IntProperty(dir, shard, "rocksdb.num-entries-active-mem-table");
    if (!family.taken || family.limit != sample_per_shard ||
        family.super_version != super_version || family.active_entries != active_entries) {
      family.taken = true;
      family.limit = sample_per_shard;
      family.super_version = super_version;
      family.active_entries = active_entries;
      family.entries.clear();
      ++stats.families_walked;
      // The sample must not push the records being served out of the cache.
      rocksdb::ReadOptions ordered;
      ordered.fill_cache = false;
      ordered.total_order_seek = true;  // Past a hash memtable's buckets.
      std::unique_ptr<rocksdb::Iterator> it(dir.db()->NewIterator(ordered, shard));
      for (it->SeekToFirst(); it->Valid() && family.entries.size() < sample_per_shard; it->Next()) {
        Record record;
        StatsSample::Entry entry;
        entry.decoded =
            DecodeRecord(absl::string_view(it->value().data(), it->value().size()), &record);
        entry.state = record.state;
        entry.lease_expires_ms = record.lease_expires_ms;
        entry.retention_expires_ms = record.retention_expires_ms;
        family.entries.push_back(entry);
      }
    }
    const std::vector<StatsSample::Entry>& entries = family.entries;
    std::array<uint64_t, kStatsStateCount> sampled = {};
    for (const StatsSample::Entry& entry : entries) {
      Record record;
      record.state = entry.state;
      record.lease_expires_ms = entry.lease_expires_ms;
      record.retention_expires_ms = entry.retention_expires_ms;
      ++sampled[entry.decoded ? StatsIndex(EffectiveState(record, now_ms)) : kCorruptStatsIndex];
    }
    const uint64_t total = entries.size();
    if (total == 0) continue;
    // A small shard is counted exactly; a large one extrapolated.
    const uint64_t population = total < sample_per_shard ? total : std::max(estimated, total);
    for (size_t i = 0; i < sampled.size(); ++i) {
      stats.records_by_state[i] += sampled[i] * population / total;
    }
  }
  stats.write_stalled = IntProperty(dir, dir.meta(), "rocksdb.is-write-stopped") != 0 ||
                        IntProperty(dir, dir.meta(), "rocksdb.actual-delayed-write-rate") != 0;
  stats.write_stall_micros = dir.WriteStallMicros();
  struct statvfs volume;
  if (statvfs(dir.path().c_str(), &volume) == 0) {
    stats.volume_free_bytes = static_cast<uint64_t>(volume.f_bavail) * volume.f_frsize;
    stats.volume_total_bytes = static_cast<uint64_t>(volume.f_blocks) * volume.f_frsize;
  }
  stats.background_error = !dir.BackgroundError().ok();
  stats.dropped_completed = drops.completed.load();
  stats.dropped_failed = drops.failed.load();
  stats.dropped_abandoned = drops.abandoned.load();
  return stats;
}

}  // namespace dedup::storage
