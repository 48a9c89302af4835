#ifndef DEDUP_CLIENT_SRC_RETRY_POLICY_H_
#define DEDUP_CLIENT_SRC_RETRY_POLICY_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dedup/client/clock.h"

namespace dedup::client {

// What a call does after an attempt that failed (Client in client.h says
// why every call of dedup.v1 is safe to send again):
//  - UNAVAILABLE (the node or the network could not be reached, or the
//    key's shard has no leader): send it again after a backoff that starts
//    at `initial_backoff` and doubles up to `max_backoff`, each wait
//    jittered to between half and all of it; but only if the wait ends
//    before the call's deadline;
//  - FAILED_PRECONDITION (the node does not own or lead the key's shard:
//    the cluster map changed): fetch the map and send it again; the first
//    time at once, later times after the same backoff, so that leadership
//    moving several times during one call is followed, never in a busy
//    loop, for as long as the deadline allows;
//  - anything else: return it to the caller.
// UNAVAILABLE and FAILED_PRECONDITION share one backoff: a call that keeps
// failing waits longer, whichever the reason.
// Thread-safe; the State of one call is used by one attempt at a time.
class RetryPolicy {
 public:
  enum class Action { kReturn, kRetry, kReroute };
  struct Decision {
    Action action;
    absl::Duration wait;  // kRetry, kReroute: how long to wait first.
  };

  // One call's way through the rule.
  struct State {
    absl::Duration backoff;  // Before the jitter, for the next wait.
    int reroutes = 0;
  };

  RetryPolicy(absl::Duration initial_backoff, absl::Duration max_backoff)
      : initial_backoff_(initial_backoff), max_backoff_(max_backoff) {}

  State Start() const { return State{initial_backoff_, 0}; }

  // What to do once an attempt of a call with `deadline` failed with
  // `failure` at `now`. Updates `state` for the attempt after.
  Decision Next(const absl::Status& failure, SteadyTime now, SteadyTime deadline,
                State* state) const;

 private:
  const absl::Duration initial_backoff_;
  const absl::Duration max_backoff_;
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_RETRY_POLICY_H_
