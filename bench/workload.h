#ifndef DEDUP_BENCH_WORKLOAD_H_
#define DEDUP_BENCH_WORKLOAD_H_

#include <cstdint>
#include <string>

namespace dedup::bench {

// What every system is driven with. The same values go to each driver, so
// one workload means the same thing for dedupd, Redis and PostgreSQL.
struct Workload {
  // Concurrent callers, each a thread with one request in flight.
  int callers = 64;
  // The asynchronous mode, when async_in_flight > 0 (dedupd's client
  // library only, batch 1): `async_threads` threads keep async_in_flight
  // claims in flight in total through its callback API, and `callers` does
  // not apply. 0: the blocking callers above.
  int async_in_flight = 0;
  int async_threads = 1;
  // Claims per request: 1 is one call each; B > 1 is a dedupd Batch of B, a
  // Redis pipeline B deep or a PostgreSQL INSERT of B rows.
  int batch = 1;
  // Fraction of claims that repeat one of the `recent_window` newest keys.
  double duplicate_ratio = 0.0;
  uint64_t recent_window = 10000;
  // Lease of a claim (dedupd lease_ms; Redis EX, rounded up to seconds;
  // PostgreSQL stores it as expires_at).
  uint64_t lease_ms = 60000;
  // dedupd only: Complete every acquired key with this retention (0: the
  // namespace's default) before the caller's next request.
  bool complete = false;
  uint64_t retention_ms = 0;
  // Size of the result each Complete stores.
  uint32_t result_bytes = 16;
  // Namespace (dedupd) or key prefix / table (peers).
  std::string ns = "bench";
  // Prefix of every key; distinct per run so runs never see each other's.
  std::string key_prefix;
  // Time bounds (seconds) and a count bound (claims measured; 0: none).
  double warmup_seconds = 1.0;
  double duration_seconds = 10.0;
  uint64_t max_claims = 0;
  // Target rate in claims per second over all callers; 0: as fast as the
  // callers go. With a rate, latency counts from when a request was due,
  // so a system that falls behind is charged for the queueing.
  double rate = 0.0;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_WORKLOAD_H_
