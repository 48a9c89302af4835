#include "scheduler.h"

#include <utility>

namespace dedup::client {

Scheduler::Scheduler() : thread_([this] { Run(); }) {}

Scheduler::~Scheduler() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Scheduler::At(absl::Time when, std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push(Entry{when, next_seq_++, std::move(task)});
}

void Scheduler::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      mu_.Await(absl::Condition(
          +[](Scheduler* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->stopping_ || !s->queue_.empty(); },
          this));
      continue;
    }
    const absl::Time due = queue_.top().when;
    if (due > absl::Now()) {
      // Wakes early for stop or for a newly queued earlier task.
      const size_t size = queue_.size();
      struct Args {
        Scheduler* s;
        size_t size;
      } args{this, size};
      mu_.AwaitWithDeadline(absl::Condition(
                                +[](Args* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->s->mu_) {
                                  return a->s->stopping_ || a->s->queue_.size() != a->size;
                                },
                                &args),
                            due);
      continue;
    }
    std::function<void()> task = std::move(const_cast<Entry&>(queue_.top()).task);
    queue_.pop();
    mu_.Unlock();
    task();
    mu_.Lock();
  }
}

}  // namespace dedup::client
