#ifndef DEDUP_CLIENT_GUARD_H_
#define DEDUP_CLIENT_GUARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dedup/client/client.h"

namespace dedup::client {

// What the side effect gets: the key, and the fencing token to pass
// downstream with it.
struct GuardContext {
  const std::string& key;
  uint64_t token;
  // Becomes true if the lease could not be kept (an Extend answered
  // STALE_TOKEN or NOT_FOUND): another worker may have taken the key over,
  // and a downstream that checks tokens will refuse this one.
  const std::atomic<bool>& lease_lost;
};

// The side effect: returns the result to store (replayed to duplicates), or
// an error, on which the claim is released so a redelivery can run.
using SideEffect = std::function<absl::StatusOr<std::string>(const GuardContext&)>;

enum class GuardOutcome {
  // The side effect ran and its result is stored: acknowledge the message.
  kExecuted,
  // The key was already COMPLETED: nothing ran; `result` is the stored one.
  // Acknowledge the message.
  kDuplicate,
  // Another worker holds the key: redeliver later.
  kInProgress,
  // The side effect failed (`work_error`) and the claim was released, so a
  // redelivery runs it again — unless `poisoned`, when this was the last
  // attempt the namespace allows: dead-letter it.
  kWorkFailed,
  // The key is poisoned (too many failed attempts): dead-letter it.
  kFailed,
  // The key is known with a different fingerprint: a client bug; dead-letter.
  kMismatch,
  // The side effect ran but by the time of Complete someone newer held the
  // key (this worker's lease had lapsed): the newer holder's outcome
  // stands; a downstream that checks tokens has refused this worker's.
  kStale,
};

const char* GuardOutcomeName(GuardOutcome outcome);

struct GuardResult {
  GuardOutcome outcome = GuardOutcome::kInProgress;
  std::string result;       // kExecuted: this run's; kDuplicate: the stored one.
  uint64_t token = 0;       // The token this worker held (kExecuted, kWorkFailed, kStale).
  absl::Status work_error;  // kWorkFailed: what the side effect returned.
  bool poisoned = false;    // kWorkFailed: the release poisoned the key.
};

struct GuardOptions {
  std::string ns;     // Namespace of every key this guard runs.
  std::string owner;  // This consumer's id (unique per process).
  // Lease of each claim; 0 takes the namespace's default (and is then
  // extended as if it were 30s).
  absl::Duration lease = absl::Seconds(30);
  // The lease is renewed every lease * extend_fraction while the side
  // effect runs.
  double extend_fraction = 1.0 / 3;
  // Retention of completions; 0 takes the namespace's default.
  absl::Duration retention = absl::ZeroDuration();
};

// The idempotent-consumer pattern in one call:
//   Claim → (ACQUIRED) run the side effect with key and token, renewing
//   the lease in the background → Complete with its result; on an error or
//   exception, Release (and rethrow the exception) → a redelivery runs it.
//   COMPLETED hands back the stored result without running anything;
//   IN_PROGRESS, FAILED and MISMATCH come back as outcomes.
//
// The one case no guard can cover: the side effect happened but Complete
// was never recorded (the process died, or Complete failed past its
// deadline — Run then returns that error). The lease ends, a redelivery
// claims the key with a larger token and runs the side effect again. The
// token closes this: pass key and token downstream, and let the
// downstream keep, per key, the highest token it has seen and whether it
// applied the effect. It refuses a token below the highest (a stale worker)
// and answers a repeat of an applied key with the earlier outcome instead
// of applying it twice.
//
// Thread-safe: one Guard serves every thread of a consumer.
class Guard {
 public:
  // `client` must outlive the guard.
  Guard(Client* client, GuardOptions options);
  ~Guard();

  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  // Runs `work` for `key` at most once across all consumers (see above).
  // A non-OK status means dedupd could not be reached for the claim (the
  // side effect did not run: redeliver) or for the Complete after the side
  // effect ran (the case above).
  absl::StatusOr<GuardResult> Run(const std::string& key, const SideEffect& work,
                                  const std::string& fingerprint = "");

 private:
  class LeaseKeeper;

  Client* const client_;
  const GuardOptions options_;
  std::unique_ptr<LeaseKeeper> keeper_;
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_GUARD_H_
