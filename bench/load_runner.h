#ifndef DEDUP_BENCH_LOAD_RUNNER_H_
#define DEDUP_BENCH_LOAD_RUNNER_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "driver.h"
#include "latency_histogram.h"
#include "workload.h"

namespace dedup::bench {

struct RunnerOptions {
  // The server process whose CPU is measured; 0: not measured.
  pid_t server_pid = 0;
  // Count the CPU of the server's child processes too (PostgreSQL).
  bool server_descendants = false;
  // Print a progress line on stderr every second.
  bool progress = true;
  // Shown on the progress line.
  std::string label;
  // A run still going this long after its end is abandoned (exit 3): a hung
  // server must not hang the bench.
  double overrun_seconds = 60.0;
};

// What a run measured. Counts and latency cover only requests sent after
// the warm-up; a request of B claims counts B claims and one latency sample.
struct RunResult {
  uint64_t claims = 0;
  uint64_t requests = 0;
  uint64_t acquired = 0;
  uint64_t duplicates = 0;
  uint64_t errors = 0;
  std::string first_error;
  double elapsed_seconds = 0.0;      // From the end of warm-up to the last answer.
  LatencyHistogram latency;          // Per request, in nanoseconds.
  double server_cpu_seconds = -1.0;  // -1: not measured.
  double client_cpu_seconds = 0.0;
  // CPU seconds other processes used meanwhile (a lower bound; see
  // CpuCensus): other work sharing the machine.
  double other_cpu_seconds = -1.0;

  double throughput() const { return elapsed_seconds > 0 ? claims / elapsed_seconds : 0.0; }
};

// Drives `driver` with `workload`: `workload.callers` threads, each with its
// own session and one request of `workload.batch` claims in flight, first
// for the warm-up, then until the duration or the claim budget runs out.
// With `workload.async_in_flight` N > 0 instead, `workload.async_threads`
// threads keep N claims in flight in total through one AsyncSession, and
// the run ends once every one of them has answered. Fails when the driver
// cannot prepare or a session cannot connect.
absl::StatusOr<RunResult> RunLoad(Driver& driver, const Workload& workload,
                                  const RunnerOptions& options);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LOAD_RUNNER_H_
