#ifndef DEDUP_SERVER_REPLICATION_TIMING_H_
#define DEDUP_SERVER_REPLICATION_TIMING_H_

// The protocol's clocks, all derived from the etcd lease's length
// (docs/replication.md): what the replicator waits for, and what the
// simulation of it waits for alike.

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace dedup::server::replication {

// How often a leader tells each follower the commit when nothing else
// goes, and how often the leadership keys are read.
inline absl::Duration Tick(absl::Duration ttl) {
  return std::clamp(ttl / 10, absl::Milliseconds(50), absl::Milliseconds(500));
}

// How often a node that a move names reads etcd and looks for elections
// to stand in, instead of once a tick: each step of a move waits for it.
inline absl::Duration MovingTick(absl::Duration ttl) {
  return std::max(Tick(ttl) / 3, absl::Milliseconds(50));
}

// Deadline of one call to a peer.
inline absl::Duration PeerTimeout(absl::Duration ttl) {
  return std::min(absl::Seconds(1), ttl / 4);
}

// How long a leader believes its lease after the keep-alive sent at some
// moment was answered with `ttl`: less than etcd can take to end it,
// allowing clocks that run 10% apart and a margin for scheduling.
inline absl::Duration TrustedLease(absl::Duration ttl) {
  return ttl * 0.9 - std::min(absl::Milliseconds(500), ttl / 10);
}

// A leader that has heard from no majority of its voters for this long
// gives the shard up, so that the voters it cannot reach may elect one
// that can commit: three calls' deadlines, and at least two ticks.
inline absl::Duration QuorumWindow(absl::Duration ttl) {
  return std::max(PeerTimeout(ttl) * 3, Tick(ttl) * 2);
}

// How long a replica refuses to promise a new epoch to another candidate
// after it accepted an append from a leader (unless that leader handed
// the shard to the candidate): the leader may be answering reads on the
// strength of that acknowledgement (ReadLease). This, not etcd's lease,
// is what keeps an old leader from answering reads after a new one
// writes: etcd has been known to end leases early.
inline absl::Duration Stickiness(absl::Duration ttl) { return ttl / 2; }

// How long a leader may answer reads after sending an append that a
// majority of its voters (itself among them) acknowledged: less than
// Stickiness, allowing clocks that run 10% apart and a margin.
inline absl::Duration ReadLease(absl::Duration ttl) {
  const absl::Duration sticky = Stickiness(ttl);
  return sticky * 0.9 - std::min(absl::Milliseconds(100), sticky / 10);
}

// How long the voter of rank `rank` among a shard's voters (0: the first)
// waits, once the shard has no leader, before it stands: the first at
// once, the second two ticks later, and each further one half a lease
// after that. The second voter has to win a third of a failed node's
// shards at once; a third that stood while it still did would fence its
// elections and lose its own, shard after shard.
inline absl::Duration ElectionWait(int64_t rank, absl::Duration ttl) {
  if (rank <= 0) return absl::ZeroDuration();
  return Tick(ttl) * 2 + (ttl / 2) * (rank - 1);
}

}  // namespace dedup::server::replication

#endif  // DEDUP_SERVER_REPLICATION_TIMING_H_
