#ifndef DEDUP_CLIENT_SRC_RETRY_POLICY_H_
#define DEDUP_CLIENT_SRC_RETRY_POLICY_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dedup/client/clock.h"

namespace dedup::client {

// What a call does after an attempt that failed (Client in client.h says
// why every call of dedup.v1 is safe to send again):
//  - UNAVAILABLE (the node or the network could not be reached): send it
//    again after a backoff that starts at `initial_backoff` and doubles up
//    to `max_backoff`, each wait jittered to between half and all of it;
//    but only if the wait ends before the call's deadline;
//  - FAILED_PRECONDITION (the key is another node's: the cluster map
//    changed): fetch the topology and send it again at once, at most
//    kMaxReroutes times, and only before the deadline;
//  - anything else: return it to the caller.
// Thread-safe; the State of one call is used by one attempt at a time.
class RetryPolicy {
 public:
  static constexpr int kMaxReroutes = 2;

  enum class Action { kReturn, kRetry, kReroute };
  struct Decision {
    Action action;
    absl::Duration wait;  // kRetry: how long to wait first.
  };

  // One call's way through the rule.
  struct State {
    absl::Duration backoff;  // Before the jitter, for the next UNAVAILABLE.
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
