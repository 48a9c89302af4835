#include "storage/storage_time.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace dedup::storage {

StorageTime::StorageTime(const Clock* clock, int64_t tolerance_ms, int64_t confirmation_ms,
                         bool unprotected)
    : clock_(clock),
      tolerance_ms_(std::max<int64_t>(tolerance_ms, 1)),
      confirmation_ms_(std::max<int64_t>(confirmation_ms, 0)),
      unprotected_(unprotected) {}

void StorageTime::Start(int64_t stored_mark_ms, PersistMark persist) {
  {
    absl::MutexLock lock(&persist_mu_);
    persist_ = std::move(persist);
  }
  mark_ms_ = stored_mark_ms;
  absl::MutexLock lock(&mu_);
  // Elapsed time across a restart is unknown: resume at the mark, or at
  // the wall clock when it is ahead.
  anchor_ms_ = std::max(clock_->NowMs(), stored_mark_ms);
  anchor_steady_ms_ = clock_->SteadyMs();
  last_ms_ = anchor_ms_;
  started_ = true;
}

int64_t StorageTime::Advance(int64_t wall_ms, int64_t steady_ms) {
  const int64_t reference = anchor_ms_ + (steady_ms - anchor_steady_ms_);
  int64_t now = reference;
  if (wall_ms > reference + tolerance_ms_) {
    if (!ahead_since_steady_ms_.has_value()) ahead_since_steady_ms_ = steady_ms;
    if (steady_ms - *ahead_since_steady_ms_ >= confirmation_ms_) {
      // Ahead for the whole confirmation period: the wall clock was right.
      ahead_since_steady_ms_.reset();
      anchor_ms_ = wall_ms;
      anchor_steady_ms_ = steady_ms;
      now = wall_ms;
    } else {
      ++forward_readings_;
      now = reference + tolerance_ms_;
    }
  } else {
    ahead_since_steady_ms_.reset();
    if (wall_ms >= reference - tolerance_ms_) {
      anchor_ms_ = wall_ms;
      anchor_steady_ms_ = steady_ms;
      now = wall_ms;
    } else {
      ++backward_readings_;
    }
  }
  last_ms_ = std::max(last_ms_, now);
  return last_ms_;
}

int64_t StorageTime::NowMs() {
  if (unprotected_) return clock_->NowMs();
  int64_t now = 0;
  {
    absl::MutexLock lock(&mu_);
    now = Advance(clock_->NowMs(), clock_->SteadyMs());
  }
  if (now <= mark_ms_.load()) return now;
  // Held across the write on purpose: no time above the persisted mark is
  // handed out, and this happens once per `tolerance` of storage time.
  absl::MutexLock lock(&persist_mu_);
  if (now <= mark_ms_.load()) return now;
  if (persist_ == nullptr || !persist_(now + tolerance_ms_).ok()) return mark_ms_.load();
  mark_ms_ = now + tolerance_ms_;
  return now;
}

int64_t StorageTime::CompactionNowMs() const {
  if (unprotected_) return clock_->NowMs();
  const int64_t wall_ms = clock_->NowMs();
  absl::MutexLock lock(&mu_);
  if (!started_) return std::numeric_limits<int64_t>::min();
  const int64_t reference = anchor_ms_ + (clock_->SteadyMs() - anchor_steady_ms_);
  // The rule without its allowance for a forward step: the wall clock only
  // while it is not ahead of the reference.
  const int64_t now =
      wall_ms < reference - tolerance_ms_ ? reference : std::min(wall_ms, reference);
  return std::min(now, mark_ms_.load());
}

}  // namespace dedup::storage
