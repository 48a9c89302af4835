#ifndef DEDUP_CLIENT_SRC_SCHEDULER_H_
#define DEDUP_CLIENT_SRC_SCHEDULER_H_

#include <functional>
#include <queue>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dedup::client {

// One thread that runs tasks at given times: retry backoffs, batch windows
// and deadline sweeps. Tasks run one at a time and must not block.
// Thread-safe.
class Scheduler {
 public:
  Scheduler();
  // Drops tasks not yet due and joins the thread.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs `task` at `when` (at once if it has passed).
  void At(absl::Time when, std::function<void()> task);
  void After(absl::Duration delay, std::function<void()> task) {
    At(absl::Now() + delay, std::move(task));
  }

 private:
  struct Entry {
    absl::Time when;
    uint64_t seq;  // FIFO among equal times.
    std::function<void()> task;
    bool operator>(const Entry& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };
  void Run();

  absl::Mutex mu_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_SCHEDULER_H_
