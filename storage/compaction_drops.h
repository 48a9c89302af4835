#ifndef DEDUP_STORAGE_COMPACTION_DROPS_H_
#define DEDUP_STORAGE_COMPACTION_DROPS_H_

#include <atomic>
#include <cstdint>

namespace dedup::storage {

// Counts of records the TTL compaction filter dropped since the store was
// opened. Written by compactions, read by metrics; relaxed atomics suffice.
struct CompactionDrops {
  std::atomic<uint64_t> completed{0};  // Retention of a COMPLETED record ended.
  std::atomic<uint64_t> failed{0};     // Retention of a FAILED record ended.
  std::atomic<uint64_t> abandoned{0};  // IN_PROGRESS/RELEASED past lease + grace.
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_COMPACTION_DROPS_H_
