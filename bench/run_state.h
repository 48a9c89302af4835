#ifndef DEDUP_BENCH_RUN_STATE_H_
#define DEDUP_BENCH_RUN_STATE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "driver.h"
#include "latency_histogram.h"

namespace dedup::bench {

using Clock = std::chrono::steady_clock;

Clock::duration Seconds(double s);

// How long a caller waits after a failed request before its next one, so
// that a dead server is not spun on.
inline constexpr Clock::duration kErrorPause = std::chrono::milliseconds(10);

// What the callers of one run share. The time points are constant once the
// callers start; the rest is safe for concurrent access.
struct Shared {
  Clock::time_point start;
  Clock::time_point measure_from;  // End of warm-up.
  Clock::time_point measure_until;
  uint64_t claim_budget = 0;  // 0: none.
  std::atomic<uint64_t> measured{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};  // All claims answered, warm-up included.
  std::atomic<uint64_t> failed{0};
  std::atomic<int> running{0};
  std::mutex error_mu;
  std::string first_error;  // Protected by error_mu.
};

// One caller's share of the result (in the asynchronous mode, one
// submitting thread's). Not thread-safe.
struct CallerResult {
  ClaimTally tally;
  uint64_t claims = 0;
  uint64_t requests = 0;
  LatencyHistogram latency;  // Nanoseconds.
  Clock::time_point last_answer;
};

// Counts one answered request of `claims` claims: `status` and `tally` as
// Session::ClaimBatch returned them, `origin` when its latency starts (when
// it was sent, or when it was due under a rate), `answered` when its last
// call answered. A request whose origin falls in the warm-up counts only
// towards the progress line; a failed one counts all its claims as errors
// and no latency. Sets shared->stop when the claim budget is spent. Both
// the blocking and the asynchronous mode count through this, so their
// numbers mean the same. Safe to call concurrently for distinct `out`.
void CountAnswer(const absl::Status& status, ClaimTally tally, uint64_t claims,
                 Clock::time_point origin, Clock::time_point answered, Shared* shared,
                 CallerResult* out);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_RUN_STATE_H_
