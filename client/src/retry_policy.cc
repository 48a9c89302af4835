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
  Action action;
  if (absl::IsUnavailable(failure)) {
    action = Action::kRetry;
  } else if (absl::IsFailedPrecondition(failure)) {
    action = Action::kReroute;
  } else {
    return Decision{Action::kReturn, absl::ZeroDuration()};
  }
  // A first reroute goes at once: the map that is fetched for it is new.
  const bool at_once = action == Action::kReroute && state->reroutes == 0;
  const absl::Duration wait = at_once ? absl::ZeroDuration() : Jitter(state->backoff);
  if (now + wait >= deadline) return Decision{Action::kReturn, absl::ZeroDuration()};
  if (action == Action::kReroute) ++state->reroutes;
  if (!at_once) state->backoff = std::min(state->backoff * 2, max_backoff_);
  return Decision{action, wait};
}

}  // namespace dedup::client
