#ifndef DEDUP_SERVER_WORKER_POOL_H_
#define DEDUP_SERVER_WORKER_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dedup::server {

// A fixed set of threads that run storage work off gRPC's callback threads.
// Storage calls block on fsync, and gRPC's callback threads must not block,
// so handlers hand their work here and finish the RPC from a worker.
//
// The queue is bounded: a client cannot make the server hold more waiting
// work than `max_queued` tasks, each of which holds its request.
//
// Tasks go in one of two lanes. kNormal tasks run on the pool's threads.
// kYielding tasks run on threads of their own at the lowest CPU priority
// (nice 19), which the kernel runs only on CPU that normal threads leave
// idle: one tenant's work beyond its first call then cannot slow another
// tenant's calls (design.md §10), yet it runs at full speed on an
// otherwise idle server. Both lanes share the bound of `max_queued`.
//
// Thread-safe.
class WorkerPool {
 public:
  enum class Admission { kQueued, kFull, kShuttingDown };
  enum class Lane { kNormal, kYielding };

  // `max_queued` >= 1: tasks waiting for a thread, not counting the ones
  // running. `name` is the threads' name (storage/thread_name.h); the
  // yielding lane's threads are named `name` + "-y". With no
  // `yielding_threads`, kYielding tasks run in the normal lane.
  WorkerPool(size_t threads, size_t max_queued, std::string name = "worker",
             size_t yielding_threads = 0);
  // Runs what is queued, then joins the threads.
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` in `lane`. Without running it, answers kFull while
  // `max_queued` tasks wait in both lanes, and kShuttingDown once Shutdown
  // began.
  Admission Submit(std::function<void()> task, Lane lane = Lane::kNormal);

  // Stops accepting tasks, runs the ones queued and joins the threads.
  // Idempotent.
  void Shutdown();

 private:
  void Run(Lane lane);

  const size_t max_queued_;
  const bool has_yielding_lane_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> yielding_tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // Written by the constructor and Shutdown only.
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_WORKER_POOL_H_
