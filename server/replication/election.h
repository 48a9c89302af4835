#ifndef DEDUP_SERVER_REPLICATION_ELECTION_H_
#define DEDUP_SERVER_REPLICATION_ELECTION_H_

// A replica's part in elections (docs/replication.md §3): when it stands
// for a shard that has no leader, and whether it promises a candidate a
// new epoch. Pure functions of what the replica knows: the replicator and
// the simulation of it (tests/replication/) decide with these alike.

#include <cstdint>

#include "absl/time/time.h"

namespace dedup::server::replication {

// How long a replica waits, once the shard has no leader, before it
// stands: by its rank among the voters (ElectionWait); at once when the
// last leader handed the shard to it; half a lease more when it handed
// the shard to another replica, which should win it first.
absl::Duration StandWait(int64_t rank, int32_t handoff_to, uint32_t self, absl::Duration ttl);

// The leader of the last append a replica accepted: which node (-1: none
// since it started with no promise; -2: unknown, it may have acknowledged
// one just before it started), at which epoch, and how long ago.
struct HeardLeader {
  int32_t node = -1;
  uint64_t epoch = 0;
  absl::Duration ago = absl::InfiniteDuration();
};

// Whether the replica must promise `candidate` no new epoch yet (and not
// stand itself, when it is the candidate): the leader it heard within
// Stickiness(ttl) may still answer reads on its acknowledgement (its read
// lease), unless that leader is the candidate, or handed the shard over
// at `handoff_epoch` (0: no hand-off) or later, having stopped answering
// first.
bool Sticky(const HeardLeader& heard, uint32_t candidate, uint64_t handoff_epoch,
            absl::Duration ttl);

// What a replica knows when a candidate asks it to promise `epoch`.
struct PromiseFacts {
  uint64_t epoch = 0;
  uint64_t promised = 0;   // The highest epoch it has promised.
  bool voter = false;      // It holds the shard and votes for it.
  bool reseeding = false;  // It must catch up from a copy before it votes.
  bool leading = false;    // It leads (or is taking) the shard, under a valid lease.
  bool sticky = false;     // Sticky(...) for this candidate.
};

enum class PromiseAnswer {
  kGrant,
  kNotVoter,  // A learner, or no replica at all.
  kReseeding,
  kLeading,        // The candidate read etcd before this replica won.
  kSticky,         // Its leader may still answer reads.
  kPromisedLater,  // An equal or later epoch is promised already.
};

PromiseAnswer DecidePromise(const PromiseFacts& facts);

// What a replica knows when a leader's notice says that it handed the
// shard to this replica (docs/replication.md §6).
struct NoticeFacts {
  uint64_t epoch = 0;        // The notice's: the epoch of the leader that handed over.
  bool replica = false;      // It holds the shard, under a valid lease.
  bool busy = false;         // It leads the shard, or an election for it is under way.
  uint64_t known_epoch = 0;  // The latest epoch it knows of the shard.
  uint64_t heard_epoch = 0;  // The epoch of the last append it accepted.
  uint64_t promised = 0;     // The highest epoch it has promised.
};

// Whether the replica takes the notice: the shard then has no leader, and
// it stands at once. The notice is only a hint (the election still needs
// etcd to name no leader, and a majority's promises), so a late one is
// ignored rather than acted on: one older than a leader the replica
// knows of, or than an epoch it promised another candidate, whom
// standing now would fence.
bool TakesHandOffNotice(const NoticeFacts& facts);

// What a leader knows of the shard's first voter (its preferred leader),
// when it is not that voter itself.
struct HandBackFacts {
  bool serving = false;  // It leads and serves the shard.
  bool moving = false;   // A move of the shard is under way.
  bool first_is_peer = false;
  absl::Duration first_silent_for = absl::InfiniteDuration();  // Since it last answered.
  absl::Duration first_live_for;                               // Answering without a gap.
  absl::Duration leading_for;
};

// Whether a leader hands the shard back to its first voter, so that
// leadership spreads over the nodes again after a failover: once that
// voter has answered steadily for a whole lease, and this leader has led
// for one. (The hand-off itself waits until the voter holds the whole
// log.)
bool ShouldHandBack(const HandBackFacts& facts, absl::Duration ttl);

}  // namespace dedup::server::replication

#endif  // DEDUP_SERVER_REPLICATION_ELECTION_H_
