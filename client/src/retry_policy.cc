#include "retry_policy.h"

#include <algorithm>

#include "absl/random/random.h"

namespace dedup::client {
namespace {

// Spreads the retries of callers that failed together.
absl::Duration Jitter(absl::Duration backoff) {
  thread_local absl::BitGen bits;
  return backoff * absl::Uniform(bits, 0.5, 1.0);
}

}  // namespace

RetryPolicy::Decision RetryPolicy::Next(const absl::Status& failure, SteadyTime now,
                                        SteadyTime deadline, State* state) const {
  if (absl::IsUnavailable(failure)) {
    const absl::Duration wait = Jitter(state->backoff);
    if (now + wait >= deadline) return Decision{Action::kReturn, absl::ZeroDuration()};
    state->backoff = std::min(state->backoff * 2, max_backoff_);
    return Decision{Action::kRetry, wait};
  }
  if (absl::IsFailedPrecondition(failure) && state->reroutes < kMaxReroutes && now < deadline) {
    ++state->reroutes;
    return Decision{Action::kReroute, absl::ZeroDuration()};
  }
  return Decision{Action::kReturn, absl::ZeroDuration()};
}

}  // namespace dedup::client
