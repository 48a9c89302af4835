#ifndef DEDUP_STORAGE_STORAGE_TIME_H_
#define DEDUP_STORAGE_STORAGE_TIME_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "storage/clock.h"

namespace dedup::storage {

// The time leases, retention and compaction are measured in: wall-clock
// milliseconds that survive wall-clock steps (design.md §5, "Clock").
//
// The rule. Storage time keeps a reference that advances with the monotonic
// clock from the last instant storage time agreed with the wall clock. At
// each reading, with `tolerance` and `confirmation` from the options:
//   - the wall clock within `tolerance` of the reference: storage time
//     follows the wall clock (and the reference is re-anchored there);
//   - the wall clock more than `tolerance` ahead (a forward step): storage
//     time is the reference plus `tolerance`, until the wall clock has been
//     seen ahead at every reading for `confirmation` of monotonic time;
//     then storage time jumps to the wall clock;
//   - the wall clock more than `tolerance` behind (a backward step):
//     storage time keeps following the reference, until the wall clock
//     catches up;
//   - storage time never goes backwards: a reading is at least the one
//     before it.
// Across restarts storage time never goes backwards either: every time
// handed out is at most a high-water mark persisted in the data directory,
// renewed `tolerance` ahead whenever time reaches it, and a restart resumes
// at the larger of the wall clock and that mark. Elapsed time cannot be
// measured across a restart, so a wall clock ahead of the mark then is
// taken as it is.
//
// Compaction uses CompactionNowMs, which never counts an unconfirmed
// forward step: it drops nothing before it is due in elapsed time.
//
// Thread-safe.
class StorageTime {
 public:
  // Durably stores a new high-water mark (synced even in buffered mode).
  using PersistMark = std::function<absl::Status(int64_t mark_ms)>;

  // `clock` must outlive this. `unprotected` (a test-only fault rollback)
  // makes storage time the raw wall clock: no rule, no mark.
  StorageTime(const Clock* clock, int64_t tolerance_ms, int64_t confirmation_ms,
              bool unprotected = false);

  StorageTime(const StorageTime&) = delete;
  StorageTime& operator=(const StorageTime&) = delete;

  // Once, before the first NowMs: the mark read from the data directory
  // (0 for a new one) and how to persist the next. Until then NowMs is not
  // to be called and CompactionNowMs drops nothing.
  void Start(int64_t stored_mark_ms, PersistMark persist);

  // Storage time for operations. Persists a new mark first when the time
  // reaches the stored one; if that fails, answers the stored mark (time
  // stands still, so nothing expires early) until a later call succeeds.
  int64_t NowMs();

  // Storage time for compaction: the rule without its allowance for a
  // forward step (the reference, or the wall clock while it is not ahead
  // of it), and never above the persisted mark. Never does I/O or waits on
  // I/O, so a compaction thread may call it.
  int64_t CompactionNowMs() const;

  // The persisted high-water mark.
  int64_t MarkMs() const { return mark_ms_.load(); }

  // Readings that found the wall clock stepped beyond the tolerance,
  // forward and backward, since open (a step seen by several readings
  // counts once per reading until it is confirmed or undone).
  uint64_t forward_step_readings() const { return forward_readings_.load(); }
  uint64_t backward_step_readings() const { return backward_readings_.load(); }

 private:
  // The rule above for one reading; returns the new storage time.
  int64_t Advance(int64_t wall_ms, int64_t steady_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Clock* const clock_;
  const int64_t tolerance_ms_;
  const int64_t confirmation_ms_;
  const bool unprotected_;

  mutable absl::Mutex mu_;
  int64_t anchor_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t anchor_steady_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_ms_ ABSL_GUARDED_BY(mu_) = 0;
  // Monotonic time of the first reading of an unconfirmed forward step.
  std::optional<int64_t> ahead_since_steady_ms_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;

  // Held across the write of a new mark (once per `tolerance` of time);
  // never taken by CompactionNowMs.
  absl::Mutex persist_mu_;
  PersistMark persist_ ABSL_GUARDED_BY(persist_mu_);
  std::atomic<int64_t> mark_ms_{0};

  std::atomic<uint64_t> forward_readings_{0};
  std::atomic<uint64_t> backward_readings_{0};
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_STORAGE_TIME_H_
