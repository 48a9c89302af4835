#ifndef DEDUP_BENCH_DRIVER_H_
#define DEDUP_BENCH_DRIVER_H_

#include <cstdint>
#include <functional>
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

// How an asynchronous request reports: its status and tally, with the
// meaning Session::ClaimBatch gives them.
using ClaimDone = std::function<void(const absl::Status& status, const ClaimTally& tally)>;

// A connection that takes claims without waiting for their answers, for
// the asynchronous mode (one or a few threads keep many claims in flight).
// Thread-safe.
class AsyncSession {
 public:
  // Destroy a session only after `done` has been called for every claim
  // given to it.
  virtual ~AsyncSession() = default;
  // Claims `key` as owner number `slot` (0 <= slot < the slots the session
  // was made for; at most one claim in flight per slot), one claim per
  // request, doing all that ClaimBatch does for one key (with
  // Workload::complete, the Complete of an acquired key). `done` runs once,
  // when the request's last call has answered: on a client thread, or on
  // this one before Claim returns when the claim fails at once. It must not
  // block for long. Once `done` is called the session touches nothing of
  // this request.
  virtual void Claim(int slot, const std::string& key, ClaimDone done) = 0;
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
  // An asynchronous session with owners 0..slots-1, for a system driven
  // through a callback API; UNIMPLEMENTED where there is none.
  virtual absl::StatusOr<std::unique_ptr<AsyncSession>> NewAsyncSession(int /*slots*/) {
    return absl::UnimplementedError("this driver has no asynchronous mode");
  }
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_DRIVER_H_
