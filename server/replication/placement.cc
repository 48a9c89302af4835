#include "server/replication/placement.h"

#include <algorithm>
#include <map>
#include <utility>

namespace dedup::server::replication {
namespace {

bool Holds(const std::vector<uint32_t>& nodes, uint32_t node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

bool HoldsAny(const ShardPlacement& shard, uint32_t node) {
  return Holds(shard.voters, node) || Holds(shard.learners, node);
}

}  // namespace

std::vector<uint32_t> InitialVoters(uint32_t shard, uint32_t nodes, uint32_t replication_factor) {
  std::vector<uint32_t> voters;
  if (nodes == 0) return voters;
  for (uint32_t k = 0; k < std::min(replication_factor, nodes); ++k) {
    voters.push_back((shard + k) % nodes);
  }
  return voters;
}

std::vector<PlannedMove> PlanBalance(const std::vector<ShardPlacement>& shards,
                                     const std::set<uint32_t>& eligible) {
  std::map<uint32_t, uint32_t> counts;  // Voters per eligible node, zero included.
  for (uint32_t node : eligible) counts[node] = 0;
  for (const ShardPlacement& shard : shards) {
    for (uint32_t node : shard.voters) {
      if (counts.count(node)) ++counts[node];
    }
  }
  std::vector<PlannedMove> moves;
  std::set<uint32_t> planned;
  // The eligible node that lacks `shard` and holds the fewest.
  auto emptiest = [&](const ShardPlacement& shard) -> int64_t {
    int64_t best = -1;
    for (const auto& [node, count] : counts) {
      if (HoldsAny(shard, node)) continue;
      if (best < 0 || count < counts[static_cast<uint32_t>(best)]) best = node;
    }
    return best;
  };
  for (uint32_t s = 0; s < shards.size(); ++s) {
    const ShardPlacement& shard = shards[s];
    if (shard.moving) continue;
    for (uint32_t node : shard.voters) {
      if (counts.count(node)) continue;  // Draining, or not live.
      const int64_t to = emptiest(shard);
      if (to < 0) break;
      moves.push_back({s, node, static_cast<uint32_t>(to)});
      ++counts[static_cast<uint32_t>(to)];
      planned.insert(s);
      break;  // One move per shard at a time.
    }
  }
  while (counts.size() >= 2) {
    // Fullest and emptiest nodes, the lowest index of a tie.
    std::vector<std::pair<uint32_t, uint32_t>> by_count;  // (count, node)
    for (const auto& [node, count] : counts) by_count.emplace_back(count, node);
    std::sort(by_count.begin(), by_count.end());
    bool found = false;
    for (auto full = by_count.rbegin(); full != by_count.rend() && !found; ++full) {
      for (auto empty = by_count.begin(); empty != by_count.end() && !found; ++empty) {
        if (full->first <= empty->first + 1) break;
        for (uint32_t s = 0; s < shards.size(); ++s) {
          const ShardPlacement& shard = shards[s];
          if (shard.moving || planned.count(s) || !Holds(shard.voters, full->second) ||
              HoldsAny(shard, empty->second)) {
            continue;
          }
          moves.push_back({s, full->second, empty->second});
          --counts[full->second];
          ++counts[empty->second];
          planned.insert(s);
          found = true;
          break;
        }
      }
    }
    if (!found) break;
  }
  return moves;
}

}  // namespace dedup::server::replication
