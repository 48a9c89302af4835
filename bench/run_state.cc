#include "run_state.h"

#include <algorithm>

namespace dedup::bench {

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

void CountAnswer(const absl::Status& status, ClaimTally tally, uint64_t claims,
                 Clock::time_point origin, Clock::time_point answered, Shared* shared,
                 CallerResult* out) {
  if (!status.ok()) {
    tally.errors += claims;
    shared->failed.fetch_add(claims, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(shared->error_mu);
    if (shared->first_error.empty()) shared->first_error = status.ToString();
  }
  shared->sent.fetch_add(claims, std::memory_order_relaxed);
  if (origin < shared->measure_from) return;
  out->tally.acquired += tally.acquired;
  out->tally.duplicate += tally.duplicate;
  out->tally.errors += tally.errors;
  if (status.ok()) {
    out->latency.Record(
        std::chrono::duration_cast<std::chrono::nanoseconds>(answered - origin).count());
  }
  out->claims += claims;
  ++out->requests;
  out->last_answer = std::max(out->last_answer, answered);
  if (shared->claim_budget > 0 &&
      shared->measured.fetch_add(claims) + claims >= shared->claim_budget) {
    shared->stop = true;
  }
}

}  // namespace dedup::bench
