#include "server/worker_pool.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "storage/thread_name.h"

namespace dedup::server {

namespace {

// Lowers the calling thread, and it alone, to the lowest CPU priority:
// the SCHED_IDLE policy, under which a waking thread of any other policy
// takes the CPU from it at once, and nice 19. Nice 19 alone is not enough:
// Linux's EEVDF scheduler lets a running thread finish its slice (a few
// milliseconds) before a woken one of any weight, so another tenant's call
// waited behind it (bench/RESULTS.md, "One identity's flood"). Lowering
// either needs no privilege; a failure leaves the thread higher, which
// costs fairness, not correctness.
void YieldTheCpuFromThisThread() {
  const auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
  const sched_param param{};
  sched_setscheduler(tid, SCHED_IDLE, &param);
}

}  // namespace

WorkerPool::WorkerPool(size_t threads, size_t max_queued, std::string name, size_t yielding_threads)
    : max_queued_(max_queued),
      max_yielding_queued_(std::max<size_t>(1, max_queued / 2)),
      max_delayed_(std::max<size_t>(1, max_queued / 2)),
      has_yielding_lane_(yielding_threads > 0) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name] {
      storage::NameThisThread(name);
      Run(Lane::kNormal);
    });
  }
  yielding_threads_.reserve(yielding_threads);
  for (size_t i = 0; i < yielding_threads; ++i) {
    yielding_threads_.emplace_back([this, name] {
      storage::NameThisThread(name + "-y");
      YieldTheCpuFromThisThread();
      Run(Lane::kYielding);
    });
  }
  // Started here, so that it has the creator's priority, not a caller's.
  timer_ = std::thread([this, name] {
    storage::NameThisThread(name + "-t");
    RunTimer();
  });
}

WorkerPool::~WorkerPool() { Shutdown(); }

WorkerPool::Admission WorkerPool::Submit(std::function<void()> task, Lane lane) {
  const bool yielding = lane == Lane::kYielding && has_yielding_lane_;
  absl::MutexLock lock(&mu_);
  if (closed_) return Admission::kShuttingDown;
  if (Full(yielding)) return Admission::kFull;
  (yielding ? yielding_tasks_ : tasks_).push_back(std::move(task));
  return Admission::kQueued;
}

WorkerPool::Admission WorkerPool::SubmitAt(std::function<void()> task, Lane lane,
                                           std::chrono::steady_clock::time_point not_before) {
  if (not_before <= std::chrono::steady_clock::now()) return Submit(std::move(task), lane);
  const bool yielding = lane == Lane::kYielding && has_yielding_lane_;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return Admission::kShuttingDown;
    if (Full(yielding) || delayed_.size() >= max_delayed_) return Admission::kFull;
    const auto at = delayed_.emplace(not_before, Delayed{yielding, std::move(task)});
    if (yielding) ++delayed_yielding_;
    if (at != delayed_.begin()) return Admission::kQueued;
  }
  WakeTimer();
  return Admission::kQueued;
}

void WorkerPool::WakeTimer() {
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    timer_woken_ = true;
  }
  timer_cv_.notify_one();
}

bool WorkerPool::Full(bool yielding) const {
  return tasks_.size() + yielding_tasks_.size() + delayed_.size() >= max_queued_ ||
         (yielding && yielding_tasks_.size() + delayed_yielding_ >= max_yielding_queued_);
}

void WorkerPool::RunTimer() {
  for (;;) {
    std::optional<std::chrono::steady_clock::time_point> next;
    {
      absl::MutexLock lock(&mu_);
      const auto now = std::chrono::steady_clock::now();
      while (!delayed_.empty() && (closed_ || delayed_.begin()->first <= now)) {
        Delayed& due = delayed_.begin()->second;
        if (due.yielding) --delayed_yielding_;
        (due.yielding ? yielding_tasks_ : tasks_).push_back(std::move(due.task));
        delayed_.erase(delayed_.begin());
      }
      if (closed_) return;
      if (!delayed_.empty()) next = delayed_.begin()->first;
    }
    // A task that became the first since has set timer_woken_.
    std::unique_lock<std::mutex> lock(timer_mu_);
    const auto woken = [this] { return timer_woken_; };
    if (next) {
      timer_cv_.wait_until(lock, *next, woken);
    } else {
      timer_cv_.wait(lock, woken);
    }
    timer_woken_ = false;
  }
}

void WorkerPool::Post(std::function<void()> task) {
  if (!has_yielding_lane_) {
    task();
    return;
  }
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void WorkerPool::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_ && threads_.empty() && yielding_threads_.empty() && !timer_.joinable()) return;
    closed_ = true;
  }
  // The timer moves every delayed task into its lane before the lanes stop.
  WakeTimer();
  if (timer_.joinable()) timer_.join();
  {
    absl::MutexLock lock(&mu_);
    yielding_stopping_ = true;
  }
  for (std::thread& t : yielding_threads_) {
    if (t.joinable()) t.join();
  }
  yielding_threads_.clear();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void WorkerPool::Run(Lane lane) {
  // One condition per lane, the same for every waiter of it (absl::Mutex
  // evaluates a condition once for all waiters that share it).
  const absl::Condition ready =
      lane == Lane::kYielding ? absl::Condition(
                                    +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
                                      return p->yielding_stopping_ || !p->yielding_tasks_.empty();
                                    },
                                    this)
                              : absl::Condition(
                                    +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
                                      return p->stopping_ || !p->tasks_.empty();
                                    },
                                    this);
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(ready);
      std::deque<std::function<void()>>& queue = lane == Lane::kYielding ? yielding_tasks_ : tasks_;
      if (queue.empty()) return;  // Stopping and drained.
      task = std::move(queue.front());
      queue.pop_front();
    }
    task();
  }
}

}  // namespace dedup::server
