#ifndef DEDUP_STORAGE_STORE_STATS_H_
#define DEDUP_STORAGE_STORE_STATS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

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
  // Record families whose records this reading walked for its sample; the
  // others took no write since the last reading and kept its sample.
  size_t families_walked = 0;
};

// What the last reading sampled of each record family: the fields a
// record's effective state depends on, and what the family was then.
struct StatsSample {
  struct Entry {
    bool decoded = false;  // False: a corrupt value.
    State state = State::kAbsent;
    int64_t lease_expires_ms = 0;
    int64_t retention_expires_ms = 0;
  };
  struct Family {
    bool taken = false;
    size_t limit = 0;  // The sample_per_shard it was taken with.
    // RocksDB's version of the family's files and memtables (a flush, a
    // compaction or a new memtable changes it) and the entries written to
    // its active memtable: together, whether anything was written since.
    uint64_t super_version = 0;
    uint64_t active_entries = 0;
    std::vector<Entry> entries;
  };
  std::vector<Family> families;  // In DataDir::record_families() order.
};

// Reads RocksDB's estimates of `dir` at `now_ms`. Records by state are
// extrapolated from the first `sample_per_shard` records of each shard
// times the shard's estimated key count. Reads only; never blocks writers.
//
// With `sample` not null, a family that took no write since its sample was
// taken has its sampled records evaluated again at `now_ms` instead of
// being walked again: an ordered walk of a hash memtable copies and sorts
// the whole memtable first, which every 10 s cost an idle node several
// percent of a core (bench/RESULTS.md "The memtable").
StoreStats ReadStoreStats(const DataDir& dir, const CompactionDrops& drops, int64_t now_ms,
                          size_t sample_per_shard, StatsSample* sample = nullptr);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_STORE_STATS_H_
