#include "server/replication/move_rule.h"

#include <algorithm>

#include "server/replication/quorum.h"

namespace dedup::server::replication {
namespace {

bool Holds(const std::vector<uint32_t>& nodes, uint32_t node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

// What `node` is known to hold: the leader holds its whole log.
uint64_t Held(const MoveFacts& f, uint32_t node) {
  if (node == f.self) return f.last_seq;
  auto it = f.match.find(node);
  return it == f.match.end() ? 0 : it->second;
}

// The target answers, holds every committed entry and lags the leader's
// log by no more than the allowance.
bool TargetCaughtUp(const MoveFacts& f) {
  if (f.to == f.self) return true;
  auto silent = f.silent_for.find(f.to);
  if (silent == f.silent_for.end() || silent->second > f.heard_within) return false;
  const uint64_t held = Held(f, f.to);
  return held >= f.commit_seq && held + kMoveTailAllowance >= f.last_seq;
}

}  // namespace

const char* MoveStepName(MoveStep step) {
  switch (step) {
    case MoveStep::kWait:
      return "wait";
    case MoveStep::kPromote:
      return "promote";
    case MoveStep::kHandOff:
      return "hand off";
    case MoveStep::kRemove:
      return "remove";
    case MoveStep::kRollBack:
      return "roll back";
  }
  return "?";
}

std::vector<uint32_t> VotersAfterRemoval(const std::vector<uint32_t>& voters, uint32_t from,
                                         uint32_t to) {
  if (!Holds(voters, from)) return voters;
  std::vector<uint32_t> after;
  for (uint32_t node : voters) {
    if (node == from) {
      after.push_back(to);
    } else if (node != to) {
      after.push_back(node);
    }
  }
  return after;
}

MoveStep DecideMoveStep(const MoveFacts& f) {
  if (f.state == MoveFacts::State::kAdding) {
    // The placement lost its learner (a rollback half seen): nothing to
    // promote; the record goes.
    if (!Holds(f.learners, f.to)) return MoveStep::kRollBack;
    if (!f.target_live) {
      // A target that comes back within a few leases resumes the move;
      // one that does not, rolls it back.
      return f.target_gone_for < f.lease_ttl * 3 ? MoveStep::kWait : MoveStep::kRollBack;
    }
    return TargetCaughtUp(f) ? MoveStep::kPromote : MoveStep::kWait;
  }
  // Promoted: the source goes only once the new voter set can lose no
  // committed entry. Every entry committed while the target voted was on a
  // majority that includes it or enough of the others; the entries
  // committed before it voted must be on a majority of the new set, or an
  // election among that set could miss them.
  if (!Holds(f.voters, f.to)) return MoveStep::kWait;  // Not promoted in this placement yet.
  if (f.from == f.self) {
    return f.target_may_stand || f.target_kept_from_standing_for >= f.lease_ttl ? MoveStep::kHandOff
                                                                                : MoveStep::kWait;
  }
  if (!TargetCaughtUp(f)) return MoveStep::kWait;
  const std::vector<uint32_t> after = VotersAfterRemoval(f.voters, f.from, f.to);
  std::map<uint32_t, uint64_t> held;
  for (uint32_t node : after) held[node] = Held(f, node);
  if (MajorityHolds(after, held) < f.commit_seq) return MoveStep::kWait;
  return MoveStep::kRemove;
}

}  // namespace dedup::server::replication
