#ifndef DEDUP_BENCH_DRIVER_H_
#define DEDUP_BENCH_DRIVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dedup::bench {

// What a system answered to the claims of one request.
struct ClaimTally {
  uint64_t acquired = 0;   // The caller won the key (dedupd ACQUIRED, Redis OK, a row inserted).
  uint64_t duplicate = 0;  // The key was already taken (any other outcome).
  uint64_t errors = 0;     // Items that got an error instead of an answer.
};

// One caller's connection to the system under test. A session has at most
// one request in flight: ClaimBatch blocks until every claim in it has been
// answered. Not thread-safe: each caller thread owns one.
class Session {
 public:
  virtual ~Session() = default;
  // Claims every key in `keys` as one request of the system's batch form
  // (one call when there is one key; a dedupd Batch, a Redis pipeline or a
  // multi-row INSERT otherwise). A non-OK status means the request as a
  // whole failed (the caller counts all its keys as errors).
  virtual absl::Status ClaimBatch(const std::vector<std::string>& keys, ClaimTally* tally) = 0;
};

// A system under test (dedupd, Redis, PostgreSQL): makes sessions.
// Thread-safe: NewSession may be called from any thread.
class Driver {
 public:
  virtual ~Driver() = default;
  // A one-line description of what is being driven and how.
  virtual std::string Describe() const = 0;
  // Called once before any session is made (creates tables, checks the
  // server answers).
  virtual absl::Status Prepare() { return absl::OkStatus(); }
  // A new connection for caller number `caller`.
  virtual absl::StatusOr<std::unique_ptr<Session>> NewSession(int caller) = 0;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_DRIVER_H_
