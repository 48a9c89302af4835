#ifndef DEDUP_SERVER_REPLICATION_QUORUM_H_
#define DEDUP_SERVER_REPLICATION_QUORUM_H_

// Majorities of a shard's voters (docs/replication.md §2-§3): what a
// majority holds, when the commit point may move, and how an election's
// promises add up. Pure functions and values: no clock, no I/O, no locks.

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "absl/functional/function_ref.h"
#include "server/replication/position.h"

namespace dedup::server::replication {

// Votes that make a majority of `voters` voters.
inline uint32_t Majority(size_t voters) { return static_cast<uint32_t>(voters / 2 + 1); }

// The highest sequence number that a majority of `voters` holds, given the
// last sequence number each node is known to hold (`held`; a voter missing
// from it holds nothing). Only voters count: a learner's copy would not
// survive the loss of the leader.
uint64_t MajorityHolds(const std::vector<uint32_t>& voters,
                       const std::map<uint32_t, uint64_t>& held);
// The same, with what each voter holds from `held_by(voter)`.
uint64_t MajorityHolds(const std::vector<uint32_t>& voters,
                       absl::FunctionRef<uint64_t(uint32_t)> held_by);

// True when every majority of `voters` includes a node that holds `seq`,
// given what each holds: then an election among any majority finds it.
// That is the case when more than |voters| - Majority(|voters|) of them
// hold it.
bool EveryMajorityHolds(const std::vector<uint32_t>& voters,
                        const std::map<uint32_t, uint64_t>& held, uint64_t seq);

// True when `self` and the other voters for which `answered(voter)` holds
// make a majority of `voters` (self counts only when a voter).
bool MajorityAnswered(const std::vector<uint32_t>& voters, uint32_t self,
                      absl::FunctionRef<bool(uint32_t)> answered);

// The leader's commit point once a majority holds `majority_holds`: it only
// moves forward, and only to an entry of the leader's own epoch (at or past
// `epoch_start_seq`, the first entry it wrote): an older epoch's entry on
// a majority may still be overwritten, so it commits only under one of the
// leader's own (§3).
uint64_t NextCommit(uint64_t commit_seq, uint64_t majority_holds, uint64_t epoch_start_seq);

// One election's promises (§3): the candidate's own first, then each other
// voter's answer. Decided as soon as the outcome cannot change: won once a
// majority has promised, lost once too few voters are left to make one.
// A voter that does not answer in time (a hung or partitioned peer) is
// counted with Unanswered, so that it never holds the election open.
class Ballot {
 public:
  enum class Outcome { kPending, kWon, kLost };

  // `voters` must hold `self`, whose log ends at `self_last`.
  Ballot(std::vector<uint32_t> voters, uint32_t self, Position self_last);

  // `node` promised; its log ends at `last`.
  void Granted(uint32_t node, Position last);
  // `node` refused: it has promised `promised_epoch` (0 when it gave no
  // epoch: not a voter, or re-seeding).
  void Refused(uint32_t node, uint64_t promised_epoch);
  // `node` did not answer (call failed or timed out).
  void Unanswered(uint32_t node);

  Outcome outcome() const;
  uint32_t granted() const { return static_cast<uint32_t>(granted_.size()); }
  // The most advanced log among those that promised, and whose it is: a
  // winner adopts it, since it holds every committed entry.
  Position best() const { return best_; }
  uint32_t best_node() const { return best_node_; }
  // The highest epoch a refusing voter has promised: the next attempt goes
  // above it.
  uint64_t refused_epoch() const { return refused_epoch_; }

 private:
  bool Counts(uint32_t node) const;

  const std::vector<uint32_t> voters_;
  std::set<uint32_t> granted_;
  std::set<uint32_t> refused_;  // Refusals and silences alike.
  Position best_;
  uint32_t best_node_;
  uint64_t refused_epoch_ = 0;
};

}  // namespace dedup::server::replication

#endif  // DEDUP_SERVER_REPLICATION_QUORUM_H_
