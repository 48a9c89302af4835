#include "storage/stripe_locks.h"

#include <algorithm>

namespace dedup::storage {

size_t StripeLocks::StripeOf(uint64_t key_hash) {
  return static_cast<size_t>(key_hash >> 32) % kStripes;
}

bool StripeLocks::AnyHeld(const std::vector<uint64_t>& key_hashes) {
  for (uint64_t hash : key_hashes) {
    Stripe& stripe = stripes_[StripeOf(hash)];
    absl::MutexLock lock(&stripe.mu);
    if (stripe.held) return true;
  }
  return false;
}

void StripeLocks::Take(size_t index) {
  Stripe& stripe = stripes_[index];
  absl::MutexLock lock(&stripe.mu);
  if (stripe.held) {
    // An absl::Condition over the flag, evaluated by whichever thread
    // releases the stripe.
    ++stripe.waiters;
    stripe.mu.Await(absl::Condition(
        +[](bool* held) { return !*held; }, &stripe.held));
    --stripe.waiters;
  }
  stripe.held = true;
}

bool StripeLocks::TryTake(size_t index) {
  Stripe& stripe = stripes_[index];
  absl::MutexLock lock(&stripe.mu);
  if (stripe.held || stripe.waiters > 0) return false;
  stripe.held = true;
  return true;
}

void StripeLocks::Give(size_t index) {
  Stripe& stripe = stripes_[index];
  absl::MutexLock lock(&stripe.mu);
  stripe.held = false;
}

StripeLocks::Guard::Guard(StripeLocks* locks, const std::vector<uint64_t>& key_hashes, Untaken)
    : locks_(locks) {
  stripes_.reserve(key_hashes.size());
  for (uint64_t hash : key_hashes) stripes_.push_back(StripeOf(hash));
  std::sort(stripes_.begin(), stripes_.end());
  stripes_.erase(std::unique(stripes_.begin(), stripes_.end()), stripes_.end());
}

// The stripes taken are a run-time set, which the analysis cannot follow;
// the Guard's annotations state the effect for callers.
StripeLocks::Guard::Guard(StripeLocks* locks,
                          const std::vector<uint64_t>& key_hashes) ABSL_NO_THREAD_SAFETY_ANALYSIS
    : Guard(locks, key_hashes, Untaken{}) {
  for (size_t stripe : stripes_) locks_->Take(stripe);
  taken_ = stripes_.size();
}

std::unique_ptr<StripeLocks::Guard> StripeLocks::Guard::TryAcquire(
    StripeLocks* locks, const std::vector<uint64_t>& key_hashes) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::unique_ptr<Guard> guard(new Guard(locks, key_hashes, Untaken{}));
  for (size_t stripe : guard->stripes_) {
    // Untaken stripes are given back by the guard's destructor.
    if (!locks->TryTake(stripe)) return nullptr;
    ++guard->taken_;
  }
  return guard;
}

StripeLocks::Guard::~Guard() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (size_t i = taken_; i > 0; --i) locks_->Give(stripes_[i - 1]);
}

}  // namespace dedup::storage
