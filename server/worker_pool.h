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
// Thread-safe.
class WorkerPool {
 public:
  enum class Admission { kQueued, kFull, kShuttingDown };

  // `max_queued` >= 1: tasks waiting for a thread, not counting the ones
  // running. `name` is the threads' name (storage/thread_name.h).
  WorkerPool(size_t threads, size_t max_queued, std::string name = "worker");
  // Runs what is queued, then joins the threads.
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`. Without running it, answers kFull while `max_queued`
  // tasks wait, and kShuttingDown once Shutdown began.
  Admission Submit(std::function<void()> task);

  // Stops accepting tasks, runs the ones queued and joins the threads.
  // Idempotent.
  void Shutdown();

 private:
  void Run();

  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // Written by the constructor and Shutdown only.
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_WORKER_POOL_H_
