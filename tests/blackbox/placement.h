#ifndef DEDUP_TESTS_BLACKBOX_PLACEMENT_H_
#define DEDUP_TESTS_BLACKBOX_PLACEMENT_H_

// Where the shards of a replicated cluster are placed (docs/elastic.md
// §2), as a test reads it from the nodes' Topology answers: per shard its
// voters, its learners and the move under way (proto/dedup/v1/dedup.proto,
// ShardLeader), with node indices as in TopologyResponse.nodes.
//
// Every node answers with the placement it has seen, stamped with the etcd
// revision of the newest change in it (placement_revision), so the newest
// of the answers is the cluster's placement as far as any node knows.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dedup/v1/dedup.pb.h"
#include "tests/blackbox/shard_leaders.h"

namespace dedup::blackbox {

// The answer with the highest placement_revision (the lowest node of a
// tie); nullopt when no node answered.
std::optional<v1::TopologyResponse> NewestPlacement(const TopologyAnswers& answers);

// How many shards each node votes for, indexed by node; as long as the
// highest index that votes, plus one, and at least `min_nodes`.
std::vector<int> VotersPerNode(const v1::TopologyResponse& placement, int min_nodes = 0);

// What keeps `placement` from being settled, or nullopt when it is: a shard
// with a move under way, with learners, or without exactly
// `replication_factor` distinct voters, all of them live.
std::optional<std::string> UnsettledPlacement(const v1::TopologyResponse& placement,
                                              uint32_t replication_factor);

// The ways `placement` is not balanced over `nodes`: one line for a voter
// on a node that is not one of them, and one for each of them holding more
// than one replica away from the mean (the voters of every shard over
// len(nodes)). Empty when balanced.
std::vector<std::string> Imbalance(const v1::TopologyResponse& placement,
                                   const std::vector<int>& nodes);

// Whether `node` is among the voters, or among the learners, of `shard`.
bool VotesFor(const v1::ShardLeader& shard, int node);
bool LearnsFor(const v1::ShardLeader& shard, int node);

// The placement's ShardLeader of `shard`, or nullptr when it lists none.
const v1::ShardLeader* ShardIn(const v1::TopologyResponse& placement, uint32_t shard);

// "revision 12, live 0,1,2, draining -; shard 0: voters 0,1,2, ...": for
// the test's output and failure messages.
std::string DescribePlacement(const v1::TopologyResponse& placement);

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_PLACEMENT_H_
