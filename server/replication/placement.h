#ifndef DEDUP_SERVER_REPLICATION_PLACEMENT_H_
#define DEDUP_SERVER_REPLICATION_PLACEMENT_H_

// Where a replicated cluster's shards live (docs/elastic.md §2): the one
// home of placement decisions. A new cluster's first placement, written by
// the replicator, and the moves that bring a cluster to balance, planned by
// `dedupctl cluster add-node | remove-node | rebalance`, are decided here,
// as pure functions of what the caller read from etcd or the nodes.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace dedup::server::replication {

// Each node's zone (a failure domain: a rack, an availability zone), by
// node index; "" for a node with none given, or one not known. Nodes
// without a zone count as one zone of their own: together, since nothing
// says they fail apart.
using Zones = std::vector<std::string>;

// The voters a new cluster of `nodes` nodes gives shard `shard`: the
// `replication_factor` nodes from `shard % nodes` on, so that each node is
// the first voter, and so the preferred leader, of an equal share.
std::vector<uint32_t> InitialVoters(uint32_t shard, uint32_t nodes, uint32_t replication_factor);
// The same over zones: the nodes taken in turn from each zone (zones by
// name, nodes by index within one), and from the shard's place in that
// order on, the next node of a zone the shard does not have yet; only when
// there are fewer zones than replicas, the next nodes whatever their zone.
// Each node is still the first voter of an equal share, the first voters
// (the preferred leaders) spread over the zones as the nodes do, and with
// as many nodes in each of at least `replication_factor` zones, every
// shard's voters are in distinct zones. Without zones it is InitialVoters.
std::vector<uint32_t> InitialVoters(uint32_t shard, uint32_t replication_factor,
                                    const Zones& zones);

// How many zones a shard's voters are in. A node past the end of `zones`
// is in zone "".
uint32_t DistinctZones(const std::vector<uint32_t>& voters, const Zones& zones);
// Whether the loss of one zone alone would leave the shard without a
// majority of its voters; `*zone` is then that zone.
bool ExposedToOneZone(const std::vector<uint32_t>& voters, const Zones& zones, std::string* zone);

// One shard's placement, as a planner sees it.
struct ShardPlacement {
  std::vector<uint32_t> voters;
  std::vector<uint32_t> learners;
  bool moving = false;  // A move is under way: left alone.
  // The node a move under way takes the shard from and the one it takes
  // it to (-1: not known). A plan counts the shard where it is going.
  int64_t move_from = -1;
  int64_t move_to = -1;
};

struct PlannedMove {
  uint32_t shard = 0;
  uint32_t from = 0;
  uint32_t to = 0;
};

// `shard`'s voters once its move under way, if any, is done: the target in
// the source's place.
std::vector<uint32_t> SettledVoters(const ShardPlacement& shard);

// The moves that bring the cluster to balance, at most one per shard, for
// the nodes that may hold shards (`eligible`: live and not draining):
//   1. every voter on a node outside `eligible` goes to the eligible node
//      that lacks the shard, in a zone the shard's other voters are not
//      in when there is one, holding the fewest voters;
//   2. a shard with two voters in one zone while an eligible node lies in
//      a zone it lacks moves one of them there (the emptiest such node);
//   3. while two eligible nodes differ by more than one voter, one shard
//      of the fullest goes to the emptiest (the lowest index of a tie),
//      where that leaves the shard in no fewer zones than before: one the
//      fullest is the first voter of (its preferred leader) while it is
//      the first voter of more shards than the emptiest, one it is not
//      otherwise, so that leadership spreads as evenly as the voters.
// Apply them, then plan again: the next plan starts from what happened.
// Without zones (all "") steps 1 and 3 are the zone-blind rules and step
// 2 finds nothing.
std::vector<PlannedMove> PlanBalance(const std::vector<ShardPlacement>& shards,
                                     const std::set<uint32_t>& eligible, const Zones& zones = {});

}  // namespace dedup::server::replication

#endif  // DEDUP_SERVER_REPLICATION_PLACEMENT_H_
