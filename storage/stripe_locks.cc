#include "storage/stripe_locks.h"

#include <algorithm>

namespace dedup::storage {

size_t StripeLocks::StripeOf(uint64_t key_hash) {
  return static_cast<size_t>(key_hash >> 32) % kStripes;
}

bool StripeLocks::AnyHeld(const std::vector<uint64_t>& key_hashes) {
  for (uint64_t hash : key_hashes) {
    absl::Mutex& mu = mutexes_[StripeOf(hash)];
    if (!mu.TryLock()) return true;
    mu.Unlock();
  }
  return false;
}

// The loops lock a run-time set of mutexes, which the analysis cannot
// follow; the Guard's annotations state the effect for callers.
StripeLocks::Guard::Guard(StripeLocks* locks,
                          const std::vector<uint64_t>& key_hashes) ABSL_NO_THREAD_SAFETY_ANALYSIS
    : locks_(locks) {
  stripes_.reserve(key_hashes.size());
  for (uint64_t hash : key_hashes) stripes_.push_back(StripeOf(hash));
  std::sort(stripes_.begin(), stripes_.end());
  stripes_.erase(std::unique(stripes_.begin(), stripes_.end()), stripes_.end());
  for (size_t stripe : stripes_) locks_->mutexes_[stripe].Lock();
}

StripeLocks::Guard::~Guard() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (auto it = stripes_.rbegin(); it != stripes_.rend(); ++it) locks_->mutexes_[*it].Unlock();
}

}  // namespace dedup::storage
