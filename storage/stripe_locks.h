#ifndef DEDUP_STORAGE_STRIPE_LOCKS_H_
#define DEDUP_STORAGE_STRIPE_LOCKS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dedup::storage {

// Per-key mutual exclusion without a lock per key: a fixed array of
// mutexes, each key hashed to one stripe. Keys on different stripes proceed
// in parallel; keys on the same stripe are serialized.
//
// The analysis sees the whole array as one capability: a Guard acquires it
// (a set of stripes) and releases it when destroyed. Thread-safe.
class ABSL_LOCKABLE StripeLocks {
 public:
  static constexpr size_t kStripes = 4096;

  // Holds the stripes of a set of key hashes for its lifetime. Stripes are
  // locked in ascending order, so two guards never wait on each other in a
  // cycle.
  class ABSL_SCOPED_LOCKABLE Guard {
   public:
    Guard(StripeLocks* locks, const std::vector<uint64_t>& key_hashes)
        ABSL_EXCLUSIVE_LOCK_FUNCTION(locks);
    ~Guard() ABSL_UNLOCK_FUNCTION();

    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    StripeLocks* const locks_;
    std::vector<size_t> stripes_;  // Ascending, no repeats.
  };

  StripeLocks() = default;
  StripeLocks(const StripeLocks&) = delete;
  StripeLocks& operator=(const StripeLocks&) = delete;

  // Whether another thread holds any stripe of `key_hashes` now. A probe,
  // stale as soon as it returns: it only chooses between ways of working
  // that are both correct.
  bool AnyHeld(const std::vector<uint64_t>& key_hashes);

  // The stripe of a key hash. Uses the high half of the hash: the low half
  // picks the shard (key_codec.h), and the two must be independent.
  static size_t StripeOf(uint64_t key_hash);

 private:
  std::array<absl::Mutex, kStripes> mutexes_;
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_STRIPE_LOCKS_H_
