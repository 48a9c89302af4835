#ifndef DEDUP_STORAGE_STORE_STATS_H_
#define DEDUP_STORAGE_STORE_STATS_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "storage/compaction_drops.h"
#include "storage/record.h"

namespace dedup::storage {

class DataDir;

// The states records are counted by: the four stored states, "expired" for
// records whose lease or retention has lapsed and that await compaction,
// and "corrupt" for stored values that cannot be decoded.
inline constexpr size_t kStatsStateCount = 6;
inline constexpr size_t kCorruptStatsIndex = 5;

// Index of `state` (an effective state; kAbsent counts as expired) in
// StoreStats::records_by_state.
size_t StatsIndex(State state);

// Label of records_by_state[index]: in_progress, completed, released,
// failed, expired, corrupt.
const char* StatsStateName(size_t index);

// A reading of the store for metrics; every number is an estimate.
struct StoreStats {
  std::array<uint64_t, kStatsStateCount> records_by_state = {};  // By StatsIndex.
  uint64_t storage_bytes = 0;                                    // SST files and memtables.
  uint64_t pending_compaction_bytes = 0;
  bool write_stalled = false;       // RocksDB delays or stops writes.
  uint64_t write_stall_micros = 0;  // Writers delayed or stopped, in total since open.
  uint64_t volume_free_bytes = 0;   // Of the file system holding the data directory,
  uint64_t volume_total_bytes = 0;  // as statvfs(3) reports to unprivileged users.
  bool background_error = false;
  uint64_t dropped_completed = 0;  // By the TTL filter since open.
  uint64_t dropped_failed = 0;
  uint64_t dropped_abandoned = 0;
  // Reads (of a key, or by Scan) since open that met a record they could
  // not decode or a corrupt block.
  uint64_t corrupt_records = 0;
  // Storage time readings since open that found the wall clock stepped
  // beyond clock_step_tolerance (design.md §5, "Clock").
  uint64_t clock_forward_step_readings = 0;
  uint64_t clock_backward_step_readings = 0;
};

// Reads RocksDB's estimates of `dir` at `now_ms`. Records by state are
// extrapolated from the first `sample_per_shard` records of each shard
// times the shard's estimated key count. Reads only; never blocks writers.
StoreStats ReadStoreStats(const DataDir& dir, const CompactionDrops& drops, int64_t now_ms,
                          size_t sample_per_shard);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_STORE_STATS_H_
