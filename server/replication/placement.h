#ifndef DEDUP_SERVER_REPLICATION_PLACEMENT_H_
#define DEDUP_SERVER_REPLICATION_PLACEMENT_H_

// Where a replicated cluster's shards live (docs/elastic.md §2): the one
// home of placement decisions. A new cluster's first placement, written by
// the replicator, and the moves that bring a cluster to balance, planned by
// `dedupctl cluster add-node | remove-node | rebalance`, are decided here,
// as pure functions of what the caller read from etcd or the nodes.

#include <cstdint>
#include <set>
#include <vector>

namespace dedup::server::replication {

// The voters a new cluster of `nodes` nodes gives shard `shard`: the
// `replication_factor` nodes from `shard % nodes` on, so that each node is
// the first voter, and so the preferred leader, of an equal share.
std::vector<uint32_t> InitialVoters(uint32_t shard, uint32_t nodes, uint32_t replication_factor);

// One shard's placement, as a planner sees it.
struct ShardPlacement {
  std::vector<uint32_t> voters;
  std::vector<uint32_t> learners;
  bool moving = false;  // A move is under way: left alone.
};

struct PlannedMove {
  uint32_t shard = 0;
  uint32_t from = 0;
  uint32_t to = 0;
};

// The moves that bring the cluster to balance, at most one per shard, for
// the nodes that may hold shards (`eligible`: live and not draining):
// first every voter on a node outside `eligible` goes to the eligible node
// that lacks the shard and holds the fewest voters; then, while two
// eligible nodes differ by more than one voter, one shard of the fullest
// goes to the emptiest (the lowest index of a tie). Apply them, then plan
// again: the next plan starts from what happened.
std::vector<PlannedMove> PlanBalance(const std::vector<ShardPlacement>& shards,
                                     const std::set<uint32_t>& eligible);

}  // namespace dedup::server::replication

#endif  // DEDUP_SERVER_REPLICATION_PLACEMENT_H_
