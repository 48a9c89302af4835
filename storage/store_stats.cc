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
                          size_t sample_per_shard) {
  StoreStats stats;
  // Per family: where shards share one, its sample covers them together.
  for (rocksdb::ColumnFamilyHandle* shard : dir.record_families()) {
    stats.storage_bytes += IntProperty(dir, shard, "rocksdb.total-sst-files-size") +
                           IntProperty(dir, shard, "rocksdb.cur-size-all-mem-tables");
    stats.pending_compaction_bytes +=
        IntProperty(dir, shard, "rocksdb.estimate-pending-compaction-bytes");
    const uint64_t estimated = IntProperty(dir, shard, "rocksdb.estimate-num-keys");
    std::array<uint64_t, kStatsStateCount> sampled = {};
    uint64_t total = 0;
    // The sample must not push the records being served out of the cache.
    rocksdb::ReadOptions sample;
    sample.fill_cache = false;
    sample.total_order_seek = true;  // Past a hash memtable's buckets.
    std::unique_ptr<rocksdb::Iterator> it(dir.db()->NewIterator(sample, shard));
    for (it->SeekToFirst(); it->Valid() && total < sample_per_shard; it->Next()) {
      Record record;
      const bool decoded =
          DecodeRecord(absl::string_view(it->value().data(), it->value().size()), &record);
      ++sampled[decoded ? StatsIndex(EffectiveState(record, now_ms)) : kCorruptStatsIndex];
      ++total;
    }
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
