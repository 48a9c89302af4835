#ifndef DEDUP_STORAGE_TTL_COMPACTION_FILTER_H_
#define DEDUP_STORAGE_TTL_COMPACTION_FILTER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "rocksdb/compaction_filter.h"
#include "storage/compaction_drops.h"
#include "storage/record.h"

namespace dedup::storage {

// True when compaction may forget `record` at `now_ms`: its retention has
// passed, or (IN_PROGRESS, RELEASED) its lease ended more than `grace_ms`
// ago. Tokens do not depend on the record (see token_allocator.h), so
// dropping it never lets a token go backwards.
bool ExpiredForCompaction(const Record& record, int64_t now_ms, int64_t grace_ms);

// Builds one filter per compaction (filters keep no state, so no locking).
// A value that cannot be decoded is kept: the filter fails safe.
class TtlCompactionFilterFactory final : public rocksdb::CompactionFilterFactory {
 public:
  // `now_ms` is read once per compaction: storage time for compaction
  // (StorageTime::CompactionNowMs). `drops` must outlive the factory.
  TtlCompactionFilterFactory(std::function<int64_t()> now_ms, int64_t grace_ms,
                             CompactionDrops* drops);

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& context) override;
  const char* Name() const override { return "dedup.TtlCompactionFilterFactory"; }

 private:
  const std::function<int64_t()> now_ms_;
  const int64_t grace_ms_;
  CompactionDrops* const drops_;
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_TTL_COMPACTION_FILTER_H_
