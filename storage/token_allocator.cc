#include "storage/token_allocator.h"

#include <algorithm>
#include <utility>

namespace dedup::storage {

TokenAllocator::TokenAllocator(uint64_t stored_ceiling, uint64_t block, PersistCeiling persist)
    : block_(std::max<uint64_t>(block, 1)),
      persist_(std::move(persist)),
      next_(std::max<uint64_t>(stored_ceiling, 1)),
      ceiling_(stored_ceiling) {}

absl::StatusOr<uint64_t> TokenAllocator::Next() {
  absl::MutexLock lock(&mu_);
  if (next_ >= ceiling_) {
    // Held across the write on purpose: no token may be handed out above
    // the persisted ceiling, and this happens once per block.
    const uint64_t ceiling = next_ + block_;
    absl::Status status = persist_(ceiling);
    if (!status.ok()) return status;
    ceiling_ = ceiling;
  }
  return next_++;
}

uint64_t TokenAllocator::Ceiling() const {
  absl::MutexLock lock(&mu_);
  return ceiling_;
}

}  // namespace dedup::storage
