#include "scheduler.h"

#include <utility>

namespace dedup::client {

Scheduler::Scheduler(const Clock* clock) : clock_(clock), thread_([this] { Run(); }) {}

Scheduler::~Scheduler() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

Scheduler::TaskId Scheduler::At(SteadyTime when, std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  const uint64_t seq = next_seq_++;
  tasks_.emplace(Key(when, seq), std::move(task));
  return TaskId{when, seq};
}

void Scheduler::Cancel(const TaskId& id) {
  absl::MutexLock lock(&mu_);
  tasks_.erase(Key(id.when, id.seq));
}

void Scheduler::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const SteadyTime due = tasks_.empty() ? SteadyTime::Infinite() : tasks_.begin()->first.first;
    if (clock_->SteadyNow() < due) {
      // Wakes early for stop, or for a task added meanwhile: it may be due
      // sooner.
      seq_seen_ = next_seq_;
      clock_->AwaitUntil(mu_, absl::Condition(this, &Scheduler::StoppingOrAdded), due);
      continue;
    }
    auto first = tasks_.begin();
    std::function<void()> task = std::move(first->second);
    tasks_.erase(first);
    mu_.Unlock();
    task();
    mu_.Lock();
  }
}

}  // namespace dedup::client
