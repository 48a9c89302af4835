#include "storage/ttl_compaction_filter.h"

#include <string>
#include <utility>

#include "storage/record_codec.h"

namespace dedup::storage {
namespace {

class TtlCompactionFilter final : public rocksdb::CompactionFilter {
 public:
  TtlCompactionFilter(int64_t now_ms, int64_t grace_ms, CompactionDrops* drops)
      : now_ms_(now_ms), grace_ms_(grace_ms), drops_(drops) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    Record record;
    if (!DecodeRecord(absl::string_view(value.data(), value.size()), &record)) {
      return false;
    }
    if (!ExpiredForCompaction(record, now_ms_, grace_ms_)) return false;
    switch (record.state) {
      case State::kCompleted:
        drops_->completed.fetch_add(1, std::memory_order_relaxed);
        break;
      case State::kFailed:
        drops_->failed.fetch_add(1, std::memory_order_relaxed);
        break;
      default:
        drops_->abandoned.fetch_add(1, std::memory_order_relaxed);
        break;
    }
    return true;
  }

  const char* Name() const override { return "dedup.TtlCompactionFilter"; }

 private:
  // One reading of the clock per compaction: a record kept at the start of
  // a compaction is not dropped halfway through it for a later "now".
  const int64_t now_ms_;
  const int64_t grace_ms_;
  CompactionDrops* const drops_;
};

}  // namespace

bool ExpiredForCompaction(const Record& record, int64_t now_ms, int64_t grace_ms) {
  switch (record.state) {
    case State::kCompleted:
    case State::kFailed:
      return record.retention_expires_ms <= now_ms;
    case State::kInProgress:
    case State::kReleased:
      return record.lease_expires_ms + grace_ms <= now_ms;
    case State::kAbsent:
      return false;
  }
  return false;
}

TtlCompactionFilterFactory::TtlCompactionFilterFactory(std::function<int64_t()> now_ms,
                                                       int64_t grace_ms, CompactionDrops* drops)
    : now_ms_(std::move(now_ms)), grace_ms_(grace_ms), drops_(drops) {}

std::unique_ptr<rocksdb::CompactionFilter> TtlCompactionFilterFactory::CreateCompactionFilter(
    const rocksdb::CompactionFilter::Context& /*context*/) {
  return std::make_unique<TtlCompactionFilter>(now_ms_(), grace_ms_, drops_);
}

}  // namespace dedup::storage
