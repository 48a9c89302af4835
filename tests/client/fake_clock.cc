#include "tests/client/fake_clock.h"

namespace dedup::client::test {
namespace {

struct Wake {
  const absl::Condition* cond;
  const FakeClock* clock;
  SteadyTime deadline;
};

bool CondOrDeadline(Wake* wake) {
  return wake->cond->Eval() || wake->clock->SteadyNow() >= wake->deadline;
}

}  // namespace

absl::Time FakeClock::Now() const {
  return start_ + absl::Nanoseconds(steady_ns_.load() + wall_step_ns_.load());
}

SteadyTime FakeClock::SteadyNow() const {
  return SteadyTime::FromOrigin(absl::Nanoseconds(steady_ns_.load()));
}

void FakeClock::AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                           SteadyTime deadline) const {
  Wake wake{&cond, this, deadline};
  if (CondOrDeadline(&wake)) return;
  // Advance locks waiting_mu_ and then `mu`: register with `mu` released.
  // Whatever changes meanwhile, the Await below sees.
  mu.Unlock();
  {
    absl::MutexLock lock(&waiting_mu_);
    waiting_.insert(&mu);
  }
  mu.Lock();
  mu.Await(absl::Condition(&CondOrDeadline, &wake));
  mu.Unlock();
  {
    absl::MutexLock lock(&waiting_mu_);
    waiting_.erase(waiting_.find(&mu));
  }
  mu.Lock();
}

void FakeClock::Advance(absl::Duration d) {
  steady_ns_.fetch_add(absl::ToInt64Nanoseconds(d));
  absl::MutexLock lock(&waiting_mu_);
  // Releasing a mutex makes absl evaluate the conditions of its waiters.
  for (absl::Mutex* mu : waiting_) {
    mu->Lock();
    mu->Unlock();
  }
}

void FakeClock::StepWallClock(absl::Duration d) {
  wall_step_ns_.fetch_add(absl::ToInt64Nanoseconds(d));
}

}  // namespace dedup::client::test
