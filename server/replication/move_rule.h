#ifndef DEDUP_SERVER_REPLICATION_MOVE_RULE_H_
#define DEDUP_SERVER_REPLICATION_MOVE_RULE_H_

// The steps of a shard move (docs/elastic.md §3), decided by the shard's
// leader from what it knows: add the target as a learner, promote it to a
// voter once it holds every committed entry, then remove the source once a
// majority of the new voter set holds every committed entry. A pure
// function of its facts; the replicator reads them and carries the step
// out as one etcd transaction.

#include <cstdint>
#include <map>
#include <vector>

#include "absl/time/time.h"

namespace dedup::server::replication {

// Entries the target may still lack of the leader's log, past the commit
// point, when it is promoted or the source is removed: under steady writes
// it is never exactly even, and a voter that lags a little costs only its
// share of the acknowledgements. Committed entries it may never lack.
inline constexpr uint64_t kMoveTailAllowance = 256;

struct MoveFacts {
  enum class State { kAdding, kPromoted };
  State state = State::kAdding;
  uint32_t self = 0;  // The leader deciding.
  uint32_t from = 0;
  uint32_t to = 0;
  // The placement as the leader holds it.
  std::vector<uint32_t> voters;
  std::vector<uint32_t> learners;
  // The target has a live etcd lease, or has been without one this long.
  bool target_live = true;
  absl::Duration target_gone_for;
  absl::Duration lease_ttl = absl::Seconds(3);
  // The leader's log and commit point.
  uint64_t last_seq = 0;
  uint64_t commit_seq = 0;
  // What each other replica has acknowledged holding, and how long ago it
  // last answered (a replica missing here was never heard from).
  std::map<uint32_t, uint64_t> match;
  std::map<uint32_t, absl::Duration> silent_for;
  // How long a replica may be silent and still count as answering.
  absl::Duration heard_within = absl::Seconds(2);
  // The target may stand for election: no copy of the shard's records to
  // it is unfinished (etcd holds no learner/<to>/<s> key). A re-seeded
  // replica stands only once a leader's append has shown it every
  // committed entry, so a leader that handed the shard over before that
  // left it without a leader until another voter's turn came. How long
  // it has not been able to: past a lease the source hands off anyway, so
  // that a key left behind can slow a move but never stop it.
  bool target_may_stand = true;
  absl::Duration target_kept_from_standing_for;
};

enum class MoveStep {
  kWait,      // Nothing to do yet.
  kPromote,   // Make the target a voter.
  kHandOff,   // This leader is the source: hand the shard to the target once it may stand.
  kRemove,    // Drop the source from the voters and close the move.
  kRollBack,  // Drop the target (gone, or no longer a learner) and close the move.
};

const char* MoveStepName(MoveStep step);

MoveStep DecideMoveStep(const MoveFacts& facts);

// The voters once `from` is removed: `to` takes its place in the order,
// which is the order leadership prefers.
std::vector<uint32_t> VotersAfterRemoval(const std::vector<uint32_t>& voters, uint32_t from,
                                         uint32_t to);

}  // namespace dedup::server::replication

#endif  // DEDUP_SERVER_REPLICATION_MOVE_RULE_H_
