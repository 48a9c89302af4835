#include "server/replication/election.h"

#include "server/replication/timing.h"

namespace dedup::server::replication {

absl::Duration StandWait(int64_t rank, int32_t handoff_to, uint32_t self, absl::Duration ttl) {
  if (handoff_to == static_cast<int32_t>(self)) return absl::ZeroDuration();
  const absl::Duration wait = ElectionWait(rank, ttl);
  return handoff_to >= 0 ? wait + ttl / 2 : wait;
}

bool Sticky(const HeardLeader& heard, uint32_t candidate, uint64_t handoff_epoch,
            absl::Duration ttl) {
  if (heard.node == -1 || heard.node == static_cast<int32_t>(candidate)) return false;
  if (heard.ago >= Stickiness(ttl)) return false;
  // The leader it heard stepped down before it named the candidate.
  return handoff_epoch == 0 || heard.epoch > handoff_epoch;
}

PromiseAnswer DecidePromise(const PromiseFacts& facts) {
  if (!facts.voter) return PromiseAnswer::kNotVoter;
  if (facts.reseeding) return PromiseAnswer::kReseeding;
  // A promise would fence a live leader starting its epoch, and two live
  // replicas would take the shard from each other in turn. While it
  // leads, its leader key keeps every other replica from standing; a
  // leader that cannot commit gives the key up.
  if (facts.leading) return PromiseAnswer::kLeading;
  if (facts.sticky) return PromiseAnswer::kSticky;
  if (facts.epoch <= facts.promised) return PromiseAnswer::kPromisedLater;
  return PromiseAnswer::kGrant;
}

bool TakesHandOffNotice(const NoticeFacts& facts) {
  if (!facts.replica || facts.busy) return false;
  return facts.epoch >= facts.known_epoch && facts.epoch >= facts.heard_epoch &&
         facts.epoch >= facts.promised;
}

bool ShouldHandBack(const HandBackFacts& facts, absl::Duration ttl) {
  return facts.serving && !facts.moving && facts.first_is_peer &&
         facts.first_silent_for <= Tick(ttl) * 2 && facts.first_live_for >= ttl &&
         facts.leading_for >= ttl;
}

}  // namespace dedup::server::replication
