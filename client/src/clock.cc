#include "dedup/client/clock.h"

#include <chrono>

namespace dedup::client {

const SystemClock* SystemClock::Default() {
  static const SystemClock* const clock = new SystemClock();
  return clock;
}

absl::Time SystemClock::Now() const { return absl::Now(); }

SteadyTime SystemClock::SteadyNow() const {
  return SteadyTime::FromOrigin(
      absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch()));
}

void SystemClock::AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                             SteadyTime deadline) const {
  mu.AwaitWithTimeout(cond, deadline - SteadyNow());
}

}  // namespace dedup::client
