#ifndef DEDUP_STORAGE_STRIPE_LOCKS_H_
#define DEDUP_STORAGE_STRIPE_LOCKS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dedup::storage {

// Per-key mutual exclusion without a lock per key: a fixed array of
// stripes, each key hashed to one. Keys on different stripes proceed in
// parallel; keys on the same stripe are serialized.
//
// A stripe is a flag, not a mutex held by a thread: the Guard that holds it
// may be released on another thread than the one that took it. A
// replicated write keeps its keys' stripes from the decision until its
// commit, which another thread sees (store.h, ApplyAsync).
//
// The analysis sees the whole array as one capability: a Guard acquires it
// (a set of stripes) and releases it when destroyed. Thread-safe.
class ABSL_LOCKABLE StripeLocks {
 public:
  static constexpr size_t kStripes = 4096;

  // Holds the stripes of a set of key hashes for its lifetime. Stripes are
  // taken in ascending order, so two guards never wait on each other in a
  // cycle.
  class ABSL_SCOPED_LOCKABLE Guard {
   public:
    // Waits for each stripe in turn.
    Guard(StripeLocks* locks, const std::vector<uint64_t>& key_hashes)
        ABSL_EXCLUSIVE_LOCK_FUNCTION(locks);
    ~Guard() ABSL_UNLOCK_FUNCTION();

    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

    // A guard of every stripe of `key_hashes`, or null, holding none, when
    // one of them is held now or waited for. Never waits.
    static std::unique_ptr<Guard> TryAcquire(StripeLocks* locks,
                                             const std::vector<uint64_t>& key_hashes);

   private:
    struct Untaken {};
    Guard(StripeLocks* locks, const std::vector<uint64_t>& key_hashes, Untaken);

    StripeLocks* const locks_;
    std::vector<size_t> stripes_;  // Ascending, no repeats.
    size_t taken_ = 0;             // How many of stripes_ this guard holds.
  };

  StripeLocks() = default;
  StripeLocks(const StripeLocks&) = delete;
  StripeLocks& operator=(const StripeLocks&) = delete;

  // Whether a guard holds any stripe of `key_hashes` now. A probe, stale as
  // soon as it returns: it only chooses between ways of working that are
  // both correct.
  bool AnyHeld(const std::vector<uint64_t>& key_hashes);

  // The stripe of a key hash. Uses the high half of the hash: the low half
  // picks the shard (key_codec.h), and the two must be independent.
  static size_t StripeOf(uint64_t key_hash);

 private:
  struct Stripe {
    absl::Mutex mu;
    bool held ABSL_GUARDED_BY(mu) = false;
    // Guards waiting for it (Take). TryTake leaves a stripe they wait for
    // to them, so that calls that never wait cannot keep it from them.
    uint32_t waiters ABSL_GUARDED_BY(mu) = 0;
  };
  void Take(size_t stripe);
  bool TryTake(size_t stripe);
  void Give(size_t stripe);

  std::array<Stripe, kStripes> stripes_;
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_STRIPE_LOCKS_H_
