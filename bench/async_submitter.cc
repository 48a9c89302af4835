#include "async_submitter.h"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dedup::bench {
namespace {

// One submitter's slots and its share of the result. The callbacks of its
// claims in flight own it with the submitter, so whichever lets go last (it
// may be a callback just past its unlock) destroys it.
//
// A std::mutex, not an absl::Mutex: this lock is taken once per claim on the
// load generator's hot path, and Debian's Abseil runs deadlock detection on
// every absl::Mutex acquisition.
class Window {
 public:
  Window(int first_slot, int slots) {
    free_.reserve(slots);
    for (int slot = first_slot + slots - 1; slot >= first_slot; --slot) free_.push_back(slot);
  }

  // Blocks until a slot is free and takes it.
  int Take() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (!free_.empty()) {
        const int slot = free_.back();
        free_.pop_back();
        ++taken_;
        return slot;
      }
      if (resting_.empty()) {
        freed_.wait(lock);
      } else if (resting_.front().first <= Clock::now()) {
        const int slot = resting_.front().second;
        resting_.pop_front();
        ++taken_;
        return slot;
      } else {
        freed_.wait_until(lock, resting_.front().first);
      }
    }
  }

  // Gives back a slot that Take handed out but no claim used.
  void Untake(int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(slot);
    --taken_;
  }

  // The claim on `slot`, due or sent at `origin`, has answered: counts it
  // and frees the slot (after kErrorPause if it failed). Called from client
  // threads.
  void Answered(int slot, const absl::Status& status, const ClaimTally& tally,
                Clock::time_point origin, Shared* shared) {
    const Clock::time_point answered = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    CountAnswer(status, tally, 1, origin, answered, shared, &result_);
    if (status.ok()) {
      free_.push_back(slot);
    } else {
      resting_.emplace_back(answered + kErrorPause, slot);
    }
    --taken_;
    // Under the lock, so that Drain cannot return before this callback is
    // done with *shared.
    freed_.notify_one();
  }

  // Blocks until every slot is back, then hands over the result.
  CallerResult Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    freed_.wait(lock, [this] { return taken_ == 0; });
    return result_;
  }

 private:
  std::mutex mu_;
  std::condition_variable freed_;
  // Protected by mu_.
  std::vector<int> free_;
  std::deque<std::pair<Clock::time_point, int>> resting_;  // Free from then on.
  int taken_ = 0;
  CallerResult result_;
};

}  // namespace

void RunSubmitter(int index, int threads, int first_slot, int slots, AsyncSession* session,
                  const Workload& workload, KeySource* keys, Shared* shared, CallerResult* out) {
  auto window = std::make_shared<Window>(first_slot, slots);
  KeySource::Picker picker(keys, 0x9e3779b97f4a7c15ULL * (index + 1));
  const auto interval =
      workload.rate > 0 ? Seconds(threads / workload.rate) : Clock::duration::zero();
  Clock::time_point due = shared->start + interval * index / threads;
  while (!shared->stop.load(std::memory_order_relaxed)) {
    if (workload.rate > 0) std::this_thread::sleep_until(due);
    const int slot = window->Take();
    const Clock::time_point sent = Clock::now();
    // The wait for a slot may have outlasted the run.
    if (sent >= shared->measure_until || shared->stop.load(std::memory_order_relaxed)) {
      window->Untake(slot);
      break;
    }
    // Paced, latency counts from when the claim was due, as a blocking
    // caller's does: a claim that waited for a slot is charged for it.
    const Clock::time_point origin = workload.rate > 0 ? due : sent;
    due += interval;
    bool duplicate = false;
    const std::string key = picker.Next(&duplicate);
    session->Claim(
        slot, key,
        [window, slot, origin, shared](const absl::Status& status, const ClaimTally& tally) {
          window->Answered(slot, status, tally, origin, shared);
        });
  }
  *out = window->Drain();
}

}  // namespace dedup::bench
