#include "server/replication/placement.h"

#include <algorithm>
#include <map>
#include <utility>

#include "server/replication/move_rule.h"

namespace dedup::server::replication {
namespace {

bool Holds(const std::vector<uint32_t>& nodes, uint32_t node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

bool HoldsAny(const ShardPlacement& shard, uint32_t node) {
  return Holds(shard.voters, node) || Holds(shard.learners, node);
}

const std::string& ZoneOf(uint32_t node, const Zones& zones) {
  static const std::string* const kNone = new std::string();
  return node < zones.size() ? zones[node] : *kNone;
}

// `voters` with `from` replaced by `to`.
std::vector<uint32_t> Replaced(std::vector<uint32_t> voters, uint32_t from, uint32_t to) {
  for (uint32_t& voter : voters) {
    if (voter == from) voter = to;
  }
  return voters;
}

}  // namespace

uint32_t DistinctZones(const std::vector<uint32_t>& voters, const Zones& zones) {
  std::set<std::string> distinct;
  for (uint32_t node : voters) distinct.insert(ZoneOf(node, zones));
  return static_cast<uint32_t>(distinct.size());
}

bool ExposedToOneZone(const std::vector<uint32_t>& voters, const Zones& zones, std::string* zone) {
  std::map<std::string, uint32_t> in_zone;
  for (uint32_t node : voters) ++in_zone[ZoneOf(node, zones)];
  const uint32_t majority = static_cast<uint32_t>(voters.size()) / 2 + 1;
  for (const auto& [name, count] : in_zone) {
    if (voters.size() - count < majority) {
      *zone = name;
      return true;
    }
  }
  return false;
}

std::vector<uint32_t> InitialVoters(uint32_t shard, uint32_t replication_factor,
                                    const Zones& zones) {
  const uint32_t n = static_cast<uint32_t>(zones.size());
  std::vector<uint32_t> voters;
  if (n == 0) return voters;
  std::map<std::string, std::vector<uint32_t>> by_zone;
  for (uint32_t node = 0; node < n; ++node) by_zone[zones[node]].push_back(node);
  std::vector<uint32_t> order;  // The nodes taken in turn from each zone.
  for (size_t round = 0; order.size() < n; ++round) {
    for (const auto& [zone, nodes] : by_zone) {
      if (round < nodes.size()) order.push_back(nodes[round]);
    }
  }
  const uint32_t want = std::min(replication_factor, n);
  const uint32_t start = shard % n;
  std::set<std::string> used;
  for (uint32_t k = 0; k < n && voters.size() < want; ++k) {
    const uint32_t node = order[(start + k) % n];
    if (used.insert(zones[node]).second) voters.push_back(node);
  }
  for (uint32_t k = 0; k < n && voters.size() < want; ++k) {
    const uint32_t node = order[(start + k) % n];
    if (!Holds(voters, node)) voters.push_back(node);
  }
  return voters;
}

std::vector<uint32_t> InitialVoters(uint32_t shard, uint32_t nodes, uint32_t replication_factor) {
  std::vector<uint32_t> voters;
  if (nodes == 0) return voters;
  for (uint32_t k = 0; k < std::min(replication_factor, nodes); ++k) {
    voters.push_back((shard + k) % nodes);
  }
  return voters;
}

std::vector<uint32_t> SettledVoters(const ShardPlacement& shard) {
  if (!shard.moving || shard.move_from < 0 || shard.move_to < 0) return shard.voters;
  const auto to = static_cast<uint32_t>(shard.move_to);
  std::vector<uint32_t> voters =
      VotersAfterRemoval(shard.voters, static_cast<uint32_t>(shard.move_from), to);
  if (!Holds(voters, to)) voters.push_back(to);
  return voters;
}

std::vector<PlannedMove> PlanBalance(const std::vector<ShardPlacement>& shards,
                                     const std::set<uint32_t>& eligible, const Zones& zones) {
  // Each shard's voters once the move under way (if any) is done: counted
  // where it comes from, a replica on its way would look like a surplus
  // there and a lack at its target, and plans made while moves run would
  // send other replicas after it and back again.
  std::vector<std::vector<uint32_t>> settled(shards.size());
  for (size_t s = 0; s < shards.size(); ++s) settled[s] = SettledVoters(shards[s]);
  std::map<uint32_t, uint32_t> counts;  // Voters per eligible node, zero included.
  for (uint32_t node : eligible) counts[node] = 0;
  for (const std::vector<uint32_t>& voters : settled) {
    for (uint32_t node : voters) {
      if (counts.count(node)) ++counts[node];
    }
  }
  std::vector<PlannedMove> moves;
  std::set<uint32_t> planned;
  // The eligible node that lacks `shard` and holds the fewest, in a zone
  // that none of its voters but `from` is in when there is one; -1: none.
  // With `new_zone_only`, only such a node.
  auto emptiest = [&](const ShardPlacement& shard, uint32_t from, bool new_zone_only) -> int64_t {
    std::set<std::string> taken;
    for (uint32_t voter : shard.voters) {
      if (voter != from) taken.insert(ZoneOf(voter, zones));
    }
    int64_t best = -1;
    bool best_new_zone = false;
    for (const auto& [node, count] : counts) {
      if (HoldsAny(shard, node)) continue;
      const bool new_zone = taken.count(ZoneOf(node, zones)) == 0;
      if (new_zone_only && !new_zone) continue;
      if (best < 0 || (new_zone && !best_new_zone) ||
          (new_zone == best_new_zone && count < counts[static_cast<uint32_t>(best)])) {
        best = node;
        best_new_zone = new_zone;
      }
    }
    return best;
  };
  for (uint32_t s = 0; s < shards.size(); ++s) {
    const ShardPlacement& shard = shards[s];
    if (shard.moving) continue;
    for (uint32_t node : shard.voters) {
      if (counts.count(node)) continue;  // Draining, or not live.
      const int64_t to = emptiest(shard, node, /*new_zone_only=*/false);
      if (to < 0) break;
      moves.push_back({s, node, static_cast<uint32_t>(to)});
      ++counts[static_cast<uint32_t>(to)];
      planned.insert(s);
      break;  // One move per shard at a time.
    }
  }
  // Two voters in one zone while an eligible node is in a zone the shard
  // lacks: the one on the fuller node goes there.
  for (uint32_t s = 0; s < shards.size(); ++s) {
    const ShardPlacement& shard = shards[s];
    if (shard.moving || planned.count(s)) continue;
    std::map<std::string, std::vector<uint32_t>> in_zone;
    for (uint32_t voter : shard.voters) in_zone[ZoneOf(voter, zones)].push_back(voter);
    for (const auto& [zone, voters] : in_zone) {
      if (voters.size() < 2) continue;
      uint32_t from = voters.front();
      for (uint32_t voter : voters) {
        if (counts.count(voter) && (!counts.count(from) || counts[voter] > counts[from])) {
          from = voter;
        }
      }
      const int64_t to = emptiest(shard, from, /*new_zone_only=*/true);
      if (to < 0) continue;
      moves.push_back({s, from, static_cast<uint32_t>(to)});
      if (counts.count(from)) --counts[from];
      ++counts[static_cast<uint32_t>(to)];
      planned.insert(s);
      break;
    }
  }
  // First voters (preferred leaders, which lead each shard whenever they
  // can) per eligible node. A moved replica keeps its place among the
  // voters, so moving a first voter moves a shard's leadership too.
  std::map<uint32_t, uint32_t> firsts;
  for (uint32_t node : eligible) firsts[node] = 0;
  for (const std::vector<uint32_t>& voters : settled) {
    if (!voters.empty() && firsts.count(voters.front())) ++firsts[voters.front()];
  }
  for (const PlannedMove& move : moves) {
    const std::vector<uint32_t>& voters = shards[move.shard].voters;
    if (voters.empty() || voters.front() != move.from) continue;
    if (firsts.count(move.from)) --firsts[move.from];
    ++firsts[move.to];
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
        // A shard the fullest node is the first voter of while it is the
        // first voter of more shards than the emptiest, any other shard
        // otherwise; failing that, any shard at all.
        const bool take_first = firsts[full->second] > firsts[empty->second];
        for (int pass = 0; pass < 2 && !found; ++pass) {
          for (uint32_t s = 0; s < shards.size(); ++s) {
            const ShardPlacement& shard = shards[s];
            if (shard.moving || planned.count(s) || !Holds(shard.voters, full->second) ||
                HoldsAny(shard, empty->second)) {
              continue;
            }
            const bool first = shard.voters.front() == full->second;
            if (pass == 0 && first != take_first) continue;
            if (DistinctZones(Replaced(shard.voters, full->second, empty->second), zones) <
                DistinctZones(shard.voters, zones)) {
              continue;
            }
            moves.push_back({s, full->second, empty->second});
            --counts[full->second];
            ++counts[empty->second];
            if (first) {
              --firsts[full->second];
              ++firsts[empty->second];
            }
            planned.insert(s);
            found = true;
            break;
          }
        }
      }
    }
    if (!found) break;
  }
  return moves;
}

}  // namespace dedup::server::replication
