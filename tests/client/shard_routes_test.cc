// Which node each key goes to, from the cluster maps the client is given.
#include "client/src/shard_routes.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"

namespace dedup::client {
namespace {

constexpr uint32_t kShards = 4;
const std::vector<std::string> kNodes = {"n0:1", "n1:1", "n2:1"};

// A key of namespace "orders" in `shard`.
std::string KeyIn(uint32_t shard) {
  for (int i = 0;; ++i) {
    std::string key = absl::StrCat("k", i);
    if (storage::ShardOf("orders", key, kShards) == shard) return key;
  }
}

// The node a key of `shard` goes to.
std::string NodeOfShard(const ShardRoutes& routes, uint32_t shard) {
  return routes.nodes()[routes.NodeFor("orders", KeyIn(shard))];
}

v1::TopologyResponse StaticMap() {
  v1::TopologyResponse map;
  map.set_shard_count(kShards);
  for (const std::string& node : kNodes) map.add_nodes(node);
  return map;
}

// A replicated map: shard s led by leaders[s] (-1: none) at epochs[s].
v1::TopologyResponse LeaderMap(const std::vector<int>& leaders,
                               const std::vector<uint64_t>& epochs) {
  v1::TopologyResponse map = StaticMap();
  map.set_replication_factor(3);
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    v1::ShardLeader* leader = map.add_leaders();
    leader->set_shard(shard);
    leader->set_leader(leaders[shard]);
    leader->set_epoch(epochs[shard]);
  }
  return map;
}

TEST(ShardRoutesTest, BeforeAnyMapTheSeedGetsEveryKey) {
  const ShardRoutes routes("seed:1");
  EXPECT_EQ(routes.nodes(), std::vector<std::string>{"seed:1"});
  EXPECT_EQ(routes.NodeFor("orders", "a"), 0u);
}

TEST(ShardRoutesTest, StaticMapSendsEachShardToNodeOfShard) {
  ShardRoutes routes("n0:1");
  EXPECT_TRUE(routes.Adopt(StaticMap(), "n0:1"));
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    EXPECT_EQ(NodeOfShard(routes, shard), kNodes[storage::NodeOfShard(shard, 3)]) << shard;
  }
}

TEST(ShardRoutesTest, ReplicatedMapSendsEachShardToItsLeader) {
  ShardRoutes routes("n0:1");
  // Not the static owners (0, 1, 2, 0).
  EXPECT_TRUE(routes.Adopt(LeaderMap({2, 0, 1, 1}, {1, 1, 1, 1}), "n0:1"));
  EXPECT_EQ(NodeOfShard(routes, 0), "n2:1");
  EXPECT_EQ(NodeOfShard(routes, 1), "n0:1");
  EXPECT_EQ(NodeOfShard(routes, 2), "n1:1");
  EXPECT_EQ(NodeOfShard(routes, 3), "n1:1");
}

TEST(ShardRoutesTest, ShardWithoutALeaderGoesToItsStaticOwner) {
  ShardRoutes routes("n0:1");
  // Shard 1 has none; shard 2 names a node the map does not have.
  routes.Adopt(LeaderMap({2, -1, 7, 1}, {1, 1, 1, 1}), "n0:1");
  EXPECT_EQ(NodeOfShard(routes, 1), kNodes[storage::NodeOfShard(1, 3)]);
  EXPECT_EQ(NodeOfShard(routes, 2), kNodes[storage::NodeOfShard(2, 3)]);
}

TEST(ShardRoutesTest, ALeaderOfAnOlderEpochDoesNotReplaceANewerOne) {
  ShardRoutes routes("n0:1");
  routes.Adopt(LeaderMap({1, 1, 1, 1}, {5, 5, 5, 5}), "n1:1");
  // A node that has not seen the elections of shards 0 and 1 yet; shard 2
  // moved on to epoch 6.
  EXPECT_TRUE(routes.Adopt(LeaderMap({0, 0, 2, 1}, {4, 4, 6, 5}), "n0:1"));
  EXPECT_EQ(NodeOfShard(routes, 0), "n1:1");
  EXPECT_EQ(NodeOfShard(routes, 1), "n1:1");
  EXPECT_EQ(NodeOfShard(routes, 2), "n2:1");
  // And nothing at all changes for an answer that is older everywhere.
  EXPECT_FALSE(routes.Adopt(LeaderMap({0, 0, 0, 0}, {1, 1, 1, 1}), "n0:1"));
  EXPECT_EQ(NodeOfShard(routes, 2), "n2:1");
}

TEST(ShardRoutesTest, ALeaderOfTheSameOrANewerEpochReplacesTheOneHeld) {
  ShardRoutes routes("n0:1");
  routes.Adopt(LeaderMap({1, 1, 1, 1}, {5, 5, 5, 5}), "n1:1");
  // Shard 0's leader's lease ended (same epoch, no leader); shard 1 has a
  // new one.
  EXPECT_TRUE(routes.Adopt(LeaderMap({-1, 2, 1, 1}, {5, 6, 5, 5}), "n2:1"));
  EXPECT_EQ(NodeOfShard(routes, 0), kNodes[storage::NodeOfShard(0, 3)]);
  EXPECT_EQ(NodeOfShard(routes, 1), "n2:1");
}

TEST(ShardRoutesTest, AnotherNodeListReplacesTheWholeMapWhateverItsEpochs) {
  ShardRoutes routes("n0:1");
  routes.Adopt(LeaderMap({1, 1, 1, 1}, {5, 5, 5, 5}), "n1:1");
  v1::TopologyResponse grown = LeaderMap({3, 3, 3, 3}, {1, 1, 1, 1});
  grown.add_nodes("n3:1");
  EXPECT_TRUE(routes.Adopt(grown, "n3:1"));
  for (uint32_t shard = 0; shard < kShards; ++shard) EXPECT_EQ(NodeOfShard(routes, shard), "n3:1");
}

TEST(ShardRoutesTest, AdoptSaysWhetherAnyKeysNodeChanged) {
  ShardRoutes routes("n0:1");
  EXPECT_TRUE(routes.Adopt(StaticMap(), "n0:1"));
  EXPECT_FALSE(routes.Adopt(StaticMap(), "n1:1"));
  EXPECT_TRUE(routes.Adopt(LeaderMap({0, 1, 2, 0}, {1, 1, 1, 1}), "n0:1"));
  // A new epoch with the same leaders sends no key elsewhere.
  EXPECT_FALSE(routes.Adopt(LeaderMap({0, 1, 2, 0}, {2, 2, 2, 2}), "n0:1"));
  EXPECT_TRUE(routes.Adopt(LeaderMap({0, 1, 2, 1}, {2, 2, 2, 3}), "n0:1"));
}

TEST(ShardRoutesTest, SingleNodeMapSendsEveryKeyToTheNodeThatAnswered) {
  ShardRoutes routes("seed:1");
  routes.Adopt(StaticMap(), "n0:1");
  v1::TopologyResponse single;  // No nodes: a single node.
  EXPECT_TRUE(routes.Adopt(single, "seed:1"));
  EXPECT_EQ(routes.nodes(), std::vector<std::string>{"seed:1"});
  EXPECT_EQ(routes.NodeFor("orders", "a"), 0u);
}

}  // namespace
}  // namespace dedup::client
