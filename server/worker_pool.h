#ifndef DEDUP_SERVER_WORKER_POOL_H_
#define DEDUP_SERVER_WORKER_POOL_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
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
// (the SCHED_IDLE policy, and nice 19): a normal thread that wakes takes
// the CPU from them at once, while normal threads want the CPU they get
// little of it, and on an otherwise idle server they run at full speed: one tenant's work beyond
// its share (tenant_quota.h) then slows other tenants' calls less. Both
// lanes share the bound of `max_queued`, of which the yielding lane may
// fill half, so that starved yielding tasks cannot crowd out normal ones.
//
// A thread inherits its creator's policy and nice value. A yielding task therefore
// never calls into gRPC, which may start a thread of its own to serve
// every caller: it hands its answer to a normal thread (Post).
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
  // `max_queued` tasks wait in both lanes (or half of that in the yielding
  // lane), and kShuttingDown once Shutdown began.
  Admission Submit(std::function<void()> task, Lane lane = Lane::kNormal);

  // Queues `task` in `lane` to run once `not_before` has come: a task of a
  // tenant paced by its rate (tenant_quota.h). From now on it counts
  // against the bounds as a queued task does, and such waiting tasks may
  // fill only half of `max_queued`, so that they cannot crowd out tasks
  // ready to run; Shutdown runs them at once. The pool's timer thread
  // moves each into its lane when its time comes.
  Admission SubmitAt(std::function<void()> task, Lane lane,
                     std::chrono::steady_clock::time_point not_before);

  // Runs `task` on a thread of the normal lane, past the bound: for the
  // answer of a task in the yielding lane, and only from one (those tasks
  // are bounded, and Shutdown keeps the normal lane until the yielding
  // lane is done). Without a yielding lane, runs `task` here.
  void Post(std::function<void()> task);

  // Stops accepting tasks, runs the ones queued, and joins the threads:
  // the yielding lane's first, then the normal lane's, which so also run
  // what the yielding tasks posted. Idempotent.
  void Shutdown();

 private:
  void Run(Lane lane);
  // The timer thread: moves each task of SubmitAt into its lane when its
  // time comes, and all of them once the pool is closed.
  void RunTimer();
  // Tells the timer thread to look again.
  void WakeTimer();
  // Whether a task for the yielding lane (`yielding`) would find the bound
  // reached.
  bool Full(bool yielding) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Delayed {
    bool yielding;
    std::function<void()> task;
  };

  const size_t max_queued_;
  const size_t max_yielding_queued_;
  const size_t max_delayed_;
  const bool has_yielding_lane_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> yielding_tasks_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // Submit refuses.
  // SubmitAt's tasks by their time, and how many of them are for the
  // yielding lane.
  std::multimap<std::chrono::steady_clock::time_point, Delayed> delayed_ ABSL_GUARDED_BY(mu_);
  size_t delayed_yielding_ ABSL_GUARDED_BY(mu_) = 0;
  // The timer thread sleeps on a condition variable of the standard
  // library, which waits on the steady clock: absl::Mutex's timed waits
  // follow the wall clock here, which a step back would stretch. Woken
  // (timer_woken_) when a task became the first of delayed_, or the pool
  // closed.
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  bool timer_woken_ = false;  // Guarded by timer_mu_.
  // Each lane's threads return once these are set and their queue is empty.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool yielding_stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Written by the constructor and Shutdown only.
  std::vector<std::thread> threads_;
  std::vector<std::thread> yielding_threads_;
  std::thread timer_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_WORKER_POOL_H_
