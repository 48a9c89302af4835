#ifndef DEDUP_CLIENT_SRC_SCHEDULER_H_
#define DEDUP_CLIENT_SRC_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/client/clock.h"

namespace dedup::client {

// One thread that runs tasks when its Clock reaches their time: retry
// backoffs, batch windows, deadline sweeps, lease renewals. Tasks run one
// at a time, in order of time (equal times in the order given), and must
// not block. Thread-safe.
class Scheduler {
 public:
  // Names a scheduled task, for Cancel.
  struct TaskId {
    SteadyTime when;
    uint64_t seq = 0;
  };

  // `clock` must outlive the scheduler.
  explicit Scheduler(const Clock* clock);
  // Drops the tasks not yet started and joins the thread.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The clock the tasks' times are read on.
  const Clock& clock() const { return *clock_; }

  // Runs `task` once the clock reaches `when` (at once if it has).
  TaskId At(SteadyTime when, std::function<void()> task);
  TaskId After(absl::Duration delay, std::function<void()> task) {
    return At(clock_->SteadyNow() + delay, std::move(task));
  }

  // Drops the task unless it has started; then it runs to its end.
  void Cancel(const TaskId& id);

  // Whether the caller runs on the scheduler's thread (in a task).
  bool IsCurrent() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  using Key = std::pair<SteadyTime, uint64_t>;  // Time, then the order given.

  void Run();
  bool StoppingOrAdded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || next_seq_ != seq_seen_;
  }

  const Clock* const clock_;

  absl::Mutex mu_;
  std::map<Key, std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t seq_seen_ ABSL_GUARDED_BY(mu_) = 0;  // next_seq_ when Run last looked.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;  // Last: starts once the rest is built.
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_SCHEDULER_H_
