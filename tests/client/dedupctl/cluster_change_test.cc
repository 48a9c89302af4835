// `dedupctl cluster` planning: how nodes' Topology answers merge into one
// view, and which moves bring a cluster to balance. The moves themselves
// run against real nodes in tests/blackbox/elastic_test.cc.
#include "cluster_change.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dedup::ctl {
namespace {

// `shards` shards of replication factor 3 placed s, s+1, s+2 (mod n) over
// the first `placed_on` of `nodes` live nodes.
PlacementView Cluster(uint32_t shards, uint32_t nodes, uint32_t placed_on) {
  PlacementView view;
  view.replication_factor = 3;
  for (uint32_t i = 0; i < nodes; ++i) {
    view.nodes.push_back("127.0.0.1:" + std::to_string(7400 + i));
    view.live.insert(i);
  }
  view.shards.resize(shards);
  for (uint32_t s = 0; s < shards; ++s) {
    for (uint32_t k = 0; k < 3; ++k) view.shards[s].voters.push_back((s + k) % placed_on);
  }
  return view;
}

// The view after the moves, as the cluster carries them out: the target
// takes the source's place.
void Apply(const std::vector<PlannedMove>& moves, PlacementView* view) {
  for (const PlannedMove& move : moves) {
    for (uint32_t& node : view->shards[move.shard].voters) {
      if (node == move.from) node = move.to;
    }
  }
}

// Plans and applies until nothing is left, as the command does; the
// number of rounds is bounded so that a planner that never settles fails.
int Settle(PlacementView* view) {
  for (int round = 0; round < 50; ++round) {
    std::vector<PlannedMove> moves = PlanBalance(*view);
    if (moves.empty()) return round;
    std::set<uint32_t> shards;
    for (const PlannedMove& move : moves) {
      EXPECT_TRUE(shards.insert(move.shard).second) << "two moves of shard " << move.shard;
    }
    Apply(moves, view);
  }
  ADD_FAILURE() << "the plan never settled";
  return -1;
}

void ExpectValidAndBalanced(const PlacementView& view, const std::set<uint32_t>& holders) {
  std::map<uint32_t, int> counts;
  for (uint32_t node : holders) counts[node] = 0;
  for (size_t s = 0; s < view.shards.size(); ++s) {
    const std::vector<uint32_t>& voters = view.shards[s].voters;
    ASSERT_EQ(voters.size(), 3u) << "shard " << s;
    std::set<uint32_t> distinct(voters.begin(), voters.end());
    EXPECT_EQ(distinct.size(), 3u) << "shard " << s << " has a node twice";
    for (uint32_t node : voters) {
      EXPECT_TRUE(holders.count(node)) << "shard " << s << " left on node " << node;
      ++counts[node];
    }
  }
  int low = 1 << 30, high = 0;
  for (const auto& [node, count] : counts) {
    low = std::min(low, count);
    high = std::max(high, count);
  }
  EXPECT_LE(high - low, 1) << "voters per node spread from " << low << " to " << high;
}

TEST(PlanBalanceTest, NewNodesGetShardsUntilEveryNodeIsWithinOne) {
  PlacementView view = Cluster(16, 5, 3);  // 48 voters on 3 of 5 nodes.
  const std::vector<PlannedMove> first = PlanBalance(view);
  ASSERT_FALSE(first.empty());
  for (const PlannedMove& move : first) EXPECT_GE(move.to, 3u) << "a move to an old node";
  EXPECT_GE(Settle(&view), 1);
  ExpectValidAndBalanced(view, {0, 1, 2, 3, 4});
}

TEST(PlanBalanceTest, ABalancedClusterPlansNothing) {
  PlacementView view = Cluster(16, 4, 4);
  Settle(&view);
  EXPECT_TRUE(PlanBalance(view).empty());
}

TEST(PlanBalanceTest, DrainingAndDeadNodesAreEmptiedOntoTheOthers) {
  PlacementView view = Cluster(16, 5, 5);
  view.draining.insert(3);
  view.live.erase(4);  // Dead: its voters go too.
  Settle(&view);
  ExpectValidAndBalanced(view, {0, 1, 2});
}

TEST(PlanBalanceTest, MovingShardsAreLeftAlone) {
  PlacementView view = Cluster(4, 4, 3);
  for (auto& shard : view.shards) shard.moving = true;
  EXPECT_TRUE(PlanBalance(view).empty());
}

TEST(PlanBalanceTest, NoShardGoesToANodeThatHoldsIt) {
  // Three nodes, every one holding every shard: nowhere to move anything.
  PlacementView view = Cluster(8, 3, 3);
  view.draining.insert(2);
  EXPECT_TRUE(PlanBalance(view).empty());
}

TEST(MergeAnswersTest, PlacementFromTheNewestAnswerLeadersFromTheHighestEpoch) {
  v1::TopologyResponse old_map, new_map;
  for (v1::TopologyResponse* map : {&old_map, &new_map}) {
    map->set_shard_count(1);
    map->set_replication_factor(3);
    map->add_nodes("a:1");
    map->add_nodes("b:1");
    map->add_nodes("c:1");
    map->add_live_nodes(0);
    map->add_live_nodes(1);
    map->add_live_nodes(2);
  }
  new_map.add_nodes("d:1");  // Only the newer answer knows node 3.
  new_map.add_live_nodes(3);
  old_map.set_placement_revision(10);
  new_map.set_placement_revision(12);
  v1::ShardLeader* old_shard = old_map.add_leaders();
  old_shard->set_leader(1);
  old_shard->set_epoch(7);
  for (uint32_t node : {0, 1, 2}) old_shard->add_voters(node);
  v1::ShardLeader* new_shard = new_map.add_leaders();
  new_shard->set_leader(0);
  new_shard->set_epoch(6);
  for (uint32_t node : {0, 1, 2}) new_shard->add_voters(node);
  new_shard->add_learners(3);
  new_shard->mutable_move()->set_from(2);
  new_shard->mutable_move()->set_to(3);
  new_shard->mutable_move()->set_state("adding");
  new_shard->mutable_move()->set_progress_known(true);
  new_shard->mutable_move()->set_copied_bytes(4096);

  std::vector<NodeAnswer> answers;
  answers.push_back({"a:1", old_map});
  answers.push_back({"b:1", new_map});
  answers.push_back({"c:1", absl::UnavailableError("down")});
  std::optional<PlacementView> view = MergeAnswers(answers);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->nodes, (std::vector<std::string>{"a:1", "b:1", "c:1", "d:1"}));
  EXPECT_EQ(view->live, (std::set<uint32_t>{0, 1, 2, 3}));
  ASSERT_EQ(view->shards.size(), 1u);
  EXPECT_EQ(view->shards[0].learners, (std::vector<uint32_t>{3}));
  EXPECT_TRUE(view->shards[0].moving);
  EXPECT_EQ(view->shards[0].move_to, 3u);
  EXPECT_EQ(view->shards[0].copied_bytes, 4096u);
  EXPECT_EQ(view->shards[0].leader, 1);  // Epoch 7 beats 6.
  EXPECT_EQ(view->IndexOf("d:1"), 3);
  EXPECT_EQ(view->IndexOf("e:1"), -1);

  EXPECT_FALSE(MergeAnswers({{"a:1", absl::UnavailableError("down")}}).has_value());
}

}  // namespace
}  // namespace dedup::ctl
