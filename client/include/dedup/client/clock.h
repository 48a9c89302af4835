#ifndef DEDUP_CLIENT_CLOCK_H_
#define DEDUP_CLIENT_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dedup::client {

// An instant of a monotonic clock. It is not a date: only the order of two
// instants of the same Clock, and the Duration between them, mean anything.
// A separate type so that it cannot be mixed up with an absl::Time.
class SteadyTime {
 public:
  // The clock's origin.
  constexpr SteadyTime() = default;
  // The instant `since_origin` after the origin.
  static SteadyTime FromOrigin(absl::Duration since_origin) { return SteadyTime(since_origin); }
  // After every instant a clock reads: a deadline that never comes.
  static SteadyTime Infinite() { return SteadyTime(absl::InfiniteDuration()); }

  friend SteadyTime operator+(SteadyTime t, absl::Duration d) {
    return SteadyTime(t.since_origin_ + d);
  }
  friend absl::Duration operator-(SteadyTime a, SteadyTime b) {
    return a.since_origin_ - b.since_origin_;
  }
  friend bool operator==(SteadyTime a, SteadyTime b) { return a.since_origin_ == b.since_origin_; }
  friend bool operator!=(SteadyTime a, SteadyTime b) { return !(a == b); }
  friend bool operator<(SteadyTime a, SteadyTime b) { return a.since_origin_ < b.since_origin_; }
  friend bool operator>(SteadyTime a, SteadyTime b) { return b < a; }
  friend bool operator<=(SteadyTime a, SteadyTime b) { return !(b < a); }
  friend bool operator>=(SteadyTime a, SteadyTime b) { return !(a < b); }

 private:
  explicit SteadyTime(absl::Duration since_origin) : since_origin_(since_origin) {}

  absl::Duration since_origin_;
};

// Where the client reads time. It keeps two clocks, and the rule is:
//
//  - Now(), the wall clock, only where a date is meant. The deadline a
//    caller gives (CallOptions::deadline) is an absl::Time, a date; a call
//    compares it with Now() once, when it starts, to learn how long it has.
//  - SteadyNow(), the monotonic clock, for everything the client times
//    itself: the time a call has left from then on, retry backoff, batch
//    windows, deadline sweeps, lease renewal periods. It never goes back,
//    so a step of the system clock (NTP, an operator) neither cuts these
//    short nor stretches them.
//
// Tests pass a clock they move by hand (ClientOptions::clock); everything
// timed on it then waits until the test moves it. Implementations are
// thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;
  virtual SteadyTime SteadyNow() const = 0;

  // With `mu` held, waits until `cond` holds or SteadyNow() reaches
  // `deadline`, and returns with `mu` held. As with any wait, `mu` is
  // released meanwhile, and it may return before either happened: callers
  // check again what they wait for. This is how the client's timer thread
  // sleeps, so that a clock moved by hand can wake it.
  virtual void AwaitUntil(absl::Mutex& mu, const absl::Condition& cond, SteadyTime deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
};

// The machine's clocks: absl::Now() and std::chrono::steady_clock.
class SystemClock final : public Clock {
 public:
  // The one instance; never destroyed.
  static const SystemClock* Default();

  absl::Time Now() const override;
  SteadyTime SteadyNow() const override;
  void AwaitUntil(absl::Mutex& mu, const absl::Condition& cond, SteadyTime deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_CLOCK_H_
