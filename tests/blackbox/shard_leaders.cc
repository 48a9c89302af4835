#include "tests/blackbox/shard_leaders.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dedup::blackbox {
namespace {

// The epoch at which `node`'s own answer names itself leader of `shard`,
// if it does.
std::optional<uint64_t> ClaimsToLead(const v1::TopologyResponse& answer, int node, uint32_t shard) {
  if (answer.leaders_size() == 0) {
    // Statically sharded: the owner leads, for good.
    if (answer.nodes_size() == 0) return std::nullopt;
    if (static_cast<int>(shard % answer.nodes_size()) != node) return std::nullopt;
    return 0;
  }
  for (const v1::ShardLeader& leader : answer.leaders()) {
    if (leader.shard() == shard && leader.leader() == node) return leader.epoch();
  }
  return std::nullopt;
}

// The newest epoch any answer names for `shard`.
uint64_t NewestEpoch(const TopologyAnswers& answers, uint32_t shard) {
  uint64_t newest = 0;
  for (const std::optional<v1::TopologyResponse>& answer : answers) {
    if (!answer.has_value()) continue;
    for (const v1::ShardLeader& leader : answer->leaders()) {
      if (leader.shard() == shard) newest = std::max(newest, leader.epoch());
    }
  }
  return newest;
}

}  // namespace

std::vector<Leadership> LeadersOf(const TopologyAnswers& answers, uint32_t shard_count) {
  std::vector<Leadership> leaders(shard_count);
  for (uint32_t shard = 0; shard < shard_count; ++shard) {
    const uint64_t newest = NewestEpoch(answers, shard);
    for (size_t node = 0; node < answers.size(); ++node) {
      if (!answers[node].has_value()) continue;
      const std::optional<uint64_t> epoch =
          ClaimsToLead(*answers[node], static_cast<int>(node), shard);
      if (epoch.has_value() && *epoch == newest) {
        leaders[shard] = Leadership{static_cast<int>(node), newest};
        break;
      }
    }
  }
  return leaders;
}

std::vector<std::string> LeadershipConflicts(const TopologyAnswers& answers, uint32_t shard_count) {
  std::vector<std::string> conflicts;
  for (uint32_t shard = 0; shard < shard_count; ++shard) {
    for (size_t a = 0; a < answers.size(); ++a) {
      if (!answers[a].has_value() || answers[a]->leaders_size() == 0) continue;
      const std::optional<uint64_t> epoch_a = ClaimsToLead(*answers[a], static_cast<int>(a), shard);
      for (size_t b = a + 1; b < answers.size() && epoch_a.has_value(); ++b) {
        if (!answers[b].has_value() || answers[b]->leaders_size() == 0) continue;
        if (ClaimsToLead(*answers[b], static_cast<int>(b), shard) == epoch_a) {
          conflicts.push_back(absl::StrCat("shard ", shard, ": nodes ", a, " and ", b,
                                           " both lead it at epoch ", *epoch_a));
        }
      }
    }
  }
  return conflicts;
}

void PrintTo(const Leadership& leadership, std::ostream* os) {
  if (leadership.node < 0) {
    *os << "no leader";
  } else {
    *os << "node " << leadership.node << " epoch " << leadership.epoch;
  }
}

std::string Describe(const std::vector<Leadership>& leaders) {
  std::vector<std::string> parts;
  for (size_t shard = 0; shard < leaders.size(); ++shard) {
    parts.push_back(leaders[shard].node < 0
                        ? absl::StrCat("shard ", shard, ": no leader")
                        : absl::StrCat("shard ", shard, ": node ", leaders[shard].node, " epoch ",
                                       leaders[shard].epoch));
  }
  return absl::StrJoin(parts, ", ");
}

void LeaderlessTimes::Observe(client::SteadyTime at, const std::vector<Leadership>& leaders) {
  const absl::Duration since_previous =
      previous_.has_value() ? at - *previous_ : absl::ZeroDuration();
  previous_ = at;
  for (size_t shard = 0; shard < shards_.size() && shard < leaders.size(); ++shard) {
    Shard& times = shards_[shard];
    Gap& gap = gaps_[shard];
    if (leaders[shard].node < 0) {
      if (!gap.open) {
        gap = Gap{true, absl::ZeroDuration()};
        ++times.gaps;
      }
      gap.length += since_previous;
      times.total += since_previous;
      times.longest = std::max(times.longest, gap.length);
      continue;
    }
    gap.open = false;
    std::optional<Leadership>& last = last_led_[shard];
    if (last.has_value() && !(*last == leaders[shard])) ++times.leader_changes;
    last = leaders[shard];
  }
}

std::string LeaderlessTimes::Report() const {
  std::string report;
  for (size_t shard = 0; shard < shards_.size(); ++shard) {
    const Shard& times = shards_[shard];
    absl::StrAppend(&report, "shard ", shard, ": no leader for ", absl::FormatDuration(times.total),
                    " in ", times.gaps, " gap(s), the longest ",
                    absl::FormatDuration(times.longest), "; ", times.leader_changes,
                    " change(s) of leader\n");
  }
  return report;
}

}  // namespace dedup::blackbox
