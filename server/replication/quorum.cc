#include "server/replication/quorum.h"

#include <algorithm>
#include <functional>

namespace dedup::server::replication {
namespace {

// What each voter holds, highest first.
std::vector<uint64_t> HeldByVoters(const std::vector<uint32_t>& voters,
                                   absl::FunctionRef<uint64_t(uint32_t)> held_by) {
  std::vector<uint64_t> seqs;
  seqs.reserve(voters.size());
  for (uint32_t voter : voters) seqs.push_back(held_by(voter));
  std::sort(seqs.begin(), seqs.end(), std::greater<uint64_t>());
  return seqs;
}

std::vector<uint64_t> HeldByVoters(const std::vector<uint32_t>& voters,
                                   const std::map<uint32_t, uint64_t>& held) {
  return HeldByVoters(voters, [&](uint32_t voter) -> uint64_t {
    auto it = held.find(voter);
    return it == held.end() ? 0 : it->second;
  });
}

}  // namespace

uint64_t MajorityHolds(const std::vector<uint32_t>& voters,
                       const std::map<uint32_t, uint64_t>& held) {
  if (voters.empty()) return 0;
  return HeldByVoters(voters, held)[Majority(voters.size()) - 1];
}

uint64_t MajorityHolds(const std::vector<uint32_t>& voters,
                       absl::FunctionRef<uint64_t(uint32_t)> held_by) {
  if (voters.empty()) return 0;
  return HeldByVoters(voters, held_by)[Majority(voters.size()) - 1];
}

bool EveryMajorityHolds(const std::vector<uint32_t>& voters,
                        const std::map<uint32_t, uint64_t>& held, uint64_t seq) {
  if (voters.empty()) return false;
  const std::vector<uint64_t> seqs = HeldByVoters(voters, held);
  const size_t holders =
      std::count_if(seqs.begin(), seqs.end(), [&](uint64_t s) { return s >= seq; });
  return holders > voters.size() - Majority(voters.size());
}

bool MajorityAnswered(const std::vector<uint32_t>& voters, uint32_t self,
                      absl::FunctionRef<bool(uint32_t)> answered) {
  const size_t count = std::count_if(voters.begin(), voters.end(), [&](uint32_t voter) {
    return voter == self || answered(voter);
  });
  return count >= Majority(voters.size());
}

uint64_t NextCommit(uint64_t commit_seq, uint64_t majority_holds, uint64_t epoch_start_seq) {
  if (majority_holds > commit_seq && majority_holds >= epoch_start_seq) return majority_holds;
  return commit_seq;
}

Ballot::Ballot(std::vector<uint32_t> voters, uint32_t self, Position self_last)
    : voters_(std::move(voters)), best_(self_last), best_node_(self) {
  granted_.insert(self);
}

bool Ballot::Counts(uint32_t node) const {
  return std::find(voters_.begin(), voters_.end(), node) != voters_.end() &&
         !granted_.count(node) && !refused_.count(node);
}

void Ballot::Granted(uint32_t node, Position last) {
  if (!Counts(node)) return;
  granted_.insert(node);
  if (best_ < last) {
    best_ = last;
    best_node_ = node;
  }
}

void Ballot::Refused(uint32_t node, uint64_t promised_epoch) {
  if (!Counts(node)) return;
  refused_.insert(node);
  refused_epoch_ = std::max(refused_epoch_, promised_epoch);
}

void Ballot::Unanswered(uint32_t node) {
  if (Counts(node)) refused_.insert(node);
}

Ballot::Outcome Ballot::outcome() const {
  const uint32_t majority = Majority(voters_.size());
  if (granted_.size() >= majority) return Outcome::kWon;
  if (voters_.size() - refused_.size() < majority) return Outcome::kLost;
  return Outcome::kPending;
}

}  // namespace dedup::server::replication
