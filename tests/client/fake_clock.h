#ifndef DEDUP_TESTS_CLIENT_FAKE_CLOCK_H_
#define DEDUP_TESTS_CLIENT_FAKE_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/client/clock.h"

namespace dedup::client::test {

// A Clock that moves only when the test moves it. Threads waiting on it (the
// client's timer threads) wake when it is moved, and see the new time.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : start_(start) {}

  absl::Time Now() const override;
  SteadyTime SteadyNow() const override;
  void AwaitUntil(absl::Mutex& mu, const absl::Condition& cond, SteadyTime deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves both clocks on by `d` and wakes every waiting thread.
  void Advance(absl::Duration d);

  // Moves the wall clock alone, as setting the system clock does.
  void StepWallClock(absl::Duration d);

 private:
  const absl::Time start_;
  std::atomic<int64_t> steady_ns_{0};
  std::atomic<int64_t> wall_step_ns_{0};

  // Mutexes of threads in AwaitUntil. Lock order: waiting_mu_, then theirs.
  mutable absl::Mutex waiting_mu_;
  mutable std::multiset<absl::Mutex*> waiting_ ABSL_GUARDED_BY(waiting_mu_);
};

}  // namespace dedup::client::test

#endif  // DEDUP_TESTS_CLIENT_FAKE_CLOCK_H_
