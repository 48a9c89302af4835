#include "server/worker_pool.h"

#include <utility>

#include "storage/thread_name.h"

namespace dedup::server {

WorkerPool::WorkerPool(size_t threads, size_t max_queued, std::string name)
    : max_queued_(max_queued) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name] {
      storage::NameThisThread(name);
      Run();
    });
  }
}

WorkerPool::~WorkerPool() { Shutdown(); }

WorkerPool::Admission WorkerPool::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return Admission::kShuttingDown;
  if (tasks_.size() >= max_queued_) return Admission::kFull;
  tasks_.push_back(std::move(task));
  return Admission::kQueued;
}

void WorkerPool::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void WorkerPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->tasks_.empty(); },
          this));
      if (tasks_.empty()) return;  // Stopping and drained.
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace dedup::server
