#ifndef DEDUP_STORAGE_CLOCK_H_
#define DEDUP_STORAGE_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace dedup::storage {

// The source of "now" for leases, retention and compaction. Every time the
// storage layer compares against is read through a Clock so that tests can
// move time instead of sleeping. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time in Unix epoch milliseconds. It may be stepped (NTP, an
  // operator) in either direction; storage/storage_time.h decides how far
  // storage follows it.
  virtual int64_t NowMs() const = 0;
  // Monotonic time in milliseconds from an arbitrary origin: never steps,
  // only measures elapsed time within one process.
  virtual int64_t SteadyMs() const = 0;
};

// The real clocks (std::chrono::system_clock and steady_clock).
class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override;
  int64_t SteadyMs() const override;
  // A process-wide instance; never destroyed.
  static SystemClock* Default();
};

// A clock that only moves when told to. For tests. AdvanceMs is time
// passing (both clocks move); StepMs and SetMs step the wall clock alone,
// as NTP or an operator would.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ms) : now_ms_(start_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  int64_t SteadyMs() const override { return steady_ms_.load(); }
  void AdvanceMs(int64_t delta_ms) {
    steady_ms_.fetch_add(delta_ms);
    now_ms_.fetch_add(delta_ms);
  }
  void StepMs(int64_t delta_ms) { now_ms_.fetch_add(delta_ms); }
  void SetMs(int64_t now_ms) { now_ms_.store(now_ms); }

 private:
  std::atomic<int64_t> now_ms_;
  std::atomic<int64_t> steady_ms_{0};
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_CLOCK_H_
