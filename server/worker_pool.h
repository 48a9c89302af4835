#ifndef DEDUP_SERVER_WORKER_POOL_H_
#define DEDUP_SERVER_WORKER_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dedup::server {

// A fixed set of threads that run storage work off gRPC's callback threads.
// Storage calls block on fsync, and gRPC's callback threads must not block,
// so handlers hand their work here and finish the RPC from a worker.
//
// Thread-safe.
class WorkerPool {
 public:
  explicit WorkerPool(size_t threads);
  // Runs what is queued, then joins the threads.
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`. Returns false, without running it, once Shutdown began.
  bool Submit(std::function<void()> task);

  // Stops accepting tasks, runs the ones queued and joins the threads.
  // Idempotent.
  void Shutdown();

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // Written by the constructor and Shutdown only.
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_WORKER_POOL_H_
