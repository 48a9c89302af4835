// The placement rules (server/replication/placement.h).

#include "server/replication/placement.h"

#include <map>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dedup::server::replication {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(InitialVotersTest, GiveEachNodeAnEqualShareOfFirstVoters) {
  std::map<uint32_t, int> first;
  for (uint32_t s = 0; s < 1024; ++s) {
    const std::vector<uint32_t> voters = InitialVoters(s, 4, 3);
    ASSERT_EQ(voters.size(), 3u);
    EXPECT_EQ(std::set<uint32_t>(voters.begin(), voters.end()).size(), 3u) << "shard " << s;
    ++first[voters.front()];
  }
  EXPECT_THAT(
      first,
      ElementsAre(std::pair<const uint32_t, int>{0, 256}, std::pair<const uint32_t, int>{1, 256},
                  std::pair<const uint32_t, int>{2, 256}, std::pair<const uint32_t, int>{3, 256}));
  EXPECT_THAT(InitialVoters(3, 4, 3), ElementsAre(3, 0, 1));
}

TEST(InitialVotersTest, NeverNameANodeTwice) {
  EXPECT_THAT(InitialVoters(1, 2, 3), ElementsAre(1, 0));
  EXPECT_THAT(InitialVoters(7, 0, 3), IsEmpty());
}

// Voters per node after applying `moves` to `shards`.
std::map<uint32_t, int> CountsAfter(std::vector<ShardPlacement> shards,
                                    const std::vector<PlannedMove>& moves) {
  for (const PlannedMove& move : moves) {
    for (uint32_t& voter : shards[move.shard].voters) {
      if (voter == move.from) voter = move.to;
    }
  }
  std::map<uint32_t, int> counts;
  for (const ShardPlacement& shard : shards) {
    EXPECT_EQ(std::set<uint32_t>(shard.voters.begin(), shard.voters.end()).size(),
              shard.voters.size());
    for (uint32_t node : shard.voters) ++counts[node];
  }
  return counts;
}

TEST(BalancePlanTest, ANewNodeGetsItsShareAndNoShardMovesTwice) {
  std::vector<ShardPlacement> shards(1024);
  for (uint32_t s = 0; s < shards.size(); ++s) shards[s].voters = InitialVoters(s, 3, 3);
  const std::vector<PlannedMove> moves = PlanBalance(shards, {0, 1, 2, 3});
  std::set<uint32_t> moved;
  for (const PlannedMove& move : moves) {
    EXPECT_TRUE(moved.insert(move.shard).second) << "shard " << move.shard << " moves twice";
    EXPECT_EQ(move.to, 3u);
  }
  const std::map<uint32_t, int> counts = CountsAfter(shards, moves);
  for (const auto& [node, count] : counts) {
    EXPECT_GE(count, 767) << "node " << node;
    EXPECT_LE(count, 769) << "node " << node;
  }
}

TEST(BalancePlanTest, ADrainingNodesVotersGoAndMovingShardsStay) {
  std::vector<ShardPlacement> shards(8);
  for (uint32_t s = 0; s < shards.size(); ++s) shards[s].voters = InitialVoters(s, 4, 3);
  shards[1].moving = true;
  const std::vector<PlannedMove> moves = PlanBalance(shards, {0, 1, 2});
  for (const PlannedMove& move : moves) {
    EXPECT_NE(move.shard, 1u);
    EXPECT_EQ(move.from, 3u);
  }
  // Node 3 votes for six of the eight shards (not 0 and 4, voters 0, 1,
  // 2); shard 1 is moving already.
  EXPECT_EQ(moves.size(), 5u);
  EXPECT_THAT(PlanBalance(shards, {}), IsEmpty());
}

// Six nodes, two in each of three zones: a, a, b, b, c, c.
const Zones kThreeZones = {"a", "a", "b", "b", "c", "c"};

std::vector<ShardPlacement> Placed(uint32_t shards, uint32_t replication_factor,
                                   const Zones& zones) {
  std::vector<ShardPlacement> placed(shards);
  for (uint32_t s = 0; s < shards; ++s) {
    placed[s].voters = InitialVoters(s, replication_factor, zones);
  }
  return placed;
}

// Applies `moves`, as the cluster would carry them out.
void Apply(const std::vector<PlannedMove>& moves, std::vector<ShardPlacement>* shards) {
  for (const PlannedMove& move : moves) {
    for (uint32_t& voter : (*shards)[move.shard].voters) {
      if (voter == move.from) voter = move.to;
    }
  }
}

// Plans and applies until nothing is left to plan; the number of plans.
int PlanUntilSettled(std::vector<ShardPlacement>* shards, const std::set<uint32_t>& eligible,
                     const Zones& zones) {
  for (int plans = 0; plans < 100; ++plans) {
    const std::vector<PlannedMove> moves = PlanBalance(*shards, eligible, zones);
    if (moves.empty()) return plans;
    Apply(moves, shards);
  }
  ADD_FAILURE() << "the plans never settle";
  return 100;
}

// First voters (preferred leaders) per node.
std::map<uint32_t, int> FirstVoters(const std::vector<ShardPlacement>& shards) {
  std::map<uint32_t, int> firsts;
  for (const ShardPlacement& shard : shards) ++firsts[shard.voters.front()];
  return firsts;
}

// A moved replica keeps its place among the shard's voters, so a node that
// takes a shard's first voter becomes its preferred leader. Growing from
// three nodes to four and then five at the default shard count, each
// node must end up the first voter of an even share, within 10%, or
// leadership stays lopsided after every growth.
TEST(BalancePlanTest, GrowthLeavesEachNodeTheFirstVoterOfAnEvenShare) {
  std::vector<ShardPlacement> shards = Placed(1024, 3, Zones(3));  // Three nodes, no zones.
  for (const std::set<uint32_t>& eligible :
       {std::set<uint32_t>{0, 1, 2, 3}, std::set<uint32_t>{0, 1, 2, 3, 4}}) {
    PlanUntilSettled(&shards, eligible, {});
    const double even = 1024.0 / eligible.size();
    const std::map<uint32_t, int> firsts = FirstVoters(shards);
    for (uint32_t node : eligible) {
      const int led = firsts.count(node) ? firsts.at(node) : 0;
      EXPECT_GE(led, even * 0.9) << "node " << node << " of " << eligible.size();
      EXPECT_LE(led, even * 1.1) << "node " << node << " of " << eligible.size();
    }
  }
}

// dedupctl's way of carrying plans out: a plan every round from what the
// cluster shows, up to `parallel` moves under way, each in the state the
// cluster shows it in (its target first a learner, then a voter beside
// the source) for a few rounds. Returns the moves made; fails the test
// when the cluster has not settled after `max_rounds`.
int DriveUntilSettled(std::vector<ShardPlacement>* shards, const std::set<uint32_t>& eligible,
                      size_t parallel, int max_rounds) {
  struct Running {
    PlannedMove move;
    int rounds_left = 0;
  };
  std::mt19937 random(7);
  std::map<uint32_t, Running> running;
  int moves = 0;
  for (int round = 0; round < max_rounds; ++round) {
    for (auto it = running.begin(); it != running.end();) {
      ShardPlacement& shard = (*shards)[it->first];
      const PlannedMove& move = it->second.move;
      if (--it->second.rounds_left > 1) {
        ++it;
        continue;
      }
      if (it->second.rounds_left == 1) {  // Promoted: both vote for a while.
        shard.learners.clear();
        shard.voters.push_back(move.to);
        ++it;
        continue;
      }
      // Removed: the target takes the source's place.
      shard.voters.pop_back();
      for (uint32_t& voter : shard.voters) {
        if (voter == move.from) voter = move.to;
      }
      shard.moving = false;
      shard.move_from = shard.move_to = -1;
      it = running.erase(it);
    }
    std::vector<PlannedMove> plan = PlanBalance(*shards, eligible);
    if (plan.empty() && running.empty()) return moves;
    for (const PlannedMove& move : plan) {
      if (running.size() >= parallel) break;
      ShardPlacement& shard = (*shards)[move.shard];
      shard.moving = true;
      shard.move_from = move.from;
      shard.move_to = move.to;
      shard.learners = {move.to};
      running[move.shard] = {move, 3 + static_cast<int>(random() % 4)};
      ++moves;
    }
  }
  ADD_FAILURE() << "still moving after " << max_rounds << " rounds, " << moves << " moves made";
  return moves;
}

// The moves made by planning and applying until nothing is left to plan.
int MovesAtRest(std::vector<ShardPlacement> shards, const std::set<uint32_t>& eligible) {
  int moves = 0;
  for (int plans = 0; plans < 100; ++plans) {
    const std::vector<PlannedMove> plan = PlanBalance(shards, eligible);
    if (plan.empty()) break;
    moves += static_cast<int>(plan.size());
    Apply(plan, &shards);
  }
  return moves;
}

// A plan made while moves are under way counts each of them where it is
// going: counted where it comes from, a node's replicas under way look
// like a surplus and go elsewhere too, and at the default shard count the
// cluster moved shards back and forth for minutes. Driven with many moves
// at once, growth and removal make no more moves than plans carried out
// one at a time would.
TEST(BalancePlanTest, PlansMadeWhileMovesRunMakeNoMoreMovesThanAtRest) {
  for (const size_t parallel : {size_t{16}, size_t{64}}) {
    SCOPED_TRACE(parallel);
    std::vector<ShardPlacement> shards = Placed(1024, 3, Zones(3));
    // Three nodes grow to four, then five; then node 4 leaves.
    for (const std::set<uint32_t>& eligible :
         {std::set<uint32_t>{0, 1, 2, 3}, std::set<uint32_t>{0, 1, 2, 3, 4},
          std::set<uint32_t>{0, 1, 2, 3}}) {
      SCOPED_TRACE(eligible.size());
      const int at_rest = MovesAtRest(shards, eligible);
      EXPECT_LE(DriveUntilSettled(&shards, eligible, parallel, 2000), at_rest + 8);
    }
    const std::map<uint32_t, int> firsts = FirstVoters(shards);
    for (uint32_t node = 0; node < 4; ++node) {
      EXPECT_NEAR(firsts.count(node) ? firsts.at(node) : 0, 256, 26) << "node " << node;
    }
  }
}

TEST(ZonesTest, WithoutZonesTheInitialVotersAreTheZoneBlindOnes) {
  for (uint32_t nodes = 1; nodes <= 7; ++nodes) {
    for (uint32_t rf = 1; rf <= 5; ++rf) {
      for (uint32_t s = 0; s < 64; ++s) {
        EXPECT_EQ(InitialVoters(s, rf, Zones(nodes, "")), InitialVoters(s, nodes, rf))
            << nodes << " nodes, rf " << rf << ", shard " << s;
      }
    }
  }
}

TEST(ZonesTest, EveryShardStartsInDistinctZonesWithAnEqualShareForEachNode) {
  // The zones need not follow the node order.
  for (const Zones& zones : {kThreeZones, Zones{"c", "a", "b", "a", "c", "b"}}) {
    std::map<uint32_t, int> first, voters;
    for (uint32_t s = 0; s < 1024; ++s) {
      const std::vector<uint32_t> placed = InitialVoters(s, 3, zones);
      ASSERT_EQ(placed.size(), 3u);
      EXPECT_EQ(DistinctZones(placed, zones), 3u) << "shard " << s;
      ++first[placed.front()];
      for (uint32_t node : placed) ++voters[node];
    }
    for (uint32_t node = 0; node < 6; ++node) {
      EXPECT_NEAR(first[node], 1024 / 6, 1) << "node " << node;
      EXPECT_NEAR(voters[node], 512, 1) << "node " << node;
    }
  }
}

TEST(ZonesTest, ZonesOfUnequalSizesStillGiveEveryShardDistinctZones) {
  // Zones b and c have a node each: those two hold every shard.
  const Zones uneven = {"a", "a", "a", "b", "c"};
  for (uint32_t s = 0; s < 1024; ++s) {
    EXPECT_EQ(DistinctZones(InitialVoters(s, 3, uneven), uneven), 3u) << "shard " << s;
  }
}

TEST(ZonesTest, WithFewerZonesThanReplicasNoZoneHoldsEveryVoter) {
  const Zones two = {"a", "a", "a", "b", "b", "b"};
  for (uint32_t s = 0; s < 1024; ++s) {
    EXPECT_EQ(DistinctZones(InitialVoters(s, 3, two), two), 2u) << "shard " << s;
  }
}

TEST(ZonesTest, OneZonesLossLeavesAShardWithoutAMajorityOnlyWhenItHoldsTooMany) {
  std::string zone;
  EXPECT_TRUE(ExposedToOneZone({0, 1, 2}, kThreeZones, &zone));
  EXPECT_EQ(zone, "a");
  EXPECT_FALSE(ExposedToOneZone({0, 2, 4}, kThreeZones, &zone));
  // Five voters, two in each of two zones: losing either leaves three.
  EXPECT_FALSE(ExposedToOneZone({0, 1, 2, 3, 4}, kThreeZones, &zone));
  // Nodes without a zone fail together.
  EXPECT_TRUE(ExposedToOneZone({0, 1, 2}, Zones(3, ""), &zone));
}

TEST(ZonesTest, RebalancingAZoneBlindClusterPutsEveryShardInThreeZones) {
  std::vector<ShardPlacement> shards(1024);
  for (uint32_t s = 0; s < shards.size(); ++s) shards[s].voters = InitialVoters(s, 6, 3);
  int exposed = 0;
  std::string zone;
  for (const ShardPlacement& shard : shards)
    exposed += ExposedToOneZone(shard.voters, kThreeZones, &zone);
  ASSERT_GT(exposed, 300) << "the zone-blind placement leaves many shards in two zones";
  PlanUntilSettled(&shards, {0, 1, 2, 3, 4, 5}, kThreeZones);
  std::map<uint32_t, int> voters;
  for (uint32_t s = 0; s < shards.size(); ++s) {
    EXPECT_EQ(DistinctZones(shards[s].voters, kThreeZones), 3u) << "shard " << s;
    for (uint32_t node : shards[s].voters) ++voters[node];
  }
  for (const auto& [node, count] : voters) EXPECT_NEAR(count, 512, 1) << "node " << node;
}

TEST(ZonesTest, ADrainedNodesShardsStayInItsZoneAndANewNodeTakesOnlyFromItsOwn) {
  std::vector<ShardPlacement> shards = Placed(1024, 3, kThreeZones);
  // Node 0 drains: zone a's other node is the only place that keeps every
  // shard in three zones. What else moves (the initial shares differ by
  // one or two) stays within its zone.
  const std::vector<PlannedMove> drained = PlanBalance(shards, {1, 2, 3, 4, 5}, kThreeZones);
  int from_drained = 0;
  for (const PlannedMove& move : drained) {
    if (move.from == 0) {
      ++from_drained;
      EXPECT_EQ(move.to, 1u) << "shard " << move.shard;
    } else {
      EXPECT_EQ(kThreeZones[move.from], kThreeZones[move.to]) << "shard " << move.shard;
    }
  }
  EXPECT_NEAR(from_drained, 512, 1);
  // A seventh node, in zone b, takes voters of zone b's nodes alone.
  Zones seven = kThreeZones;
  seven.push_back("b");
  shards = Placed(1024, 3, kThreeZones);
  PlanUntilSettled(&shards, {0, 1, 2, 3, 4, 5, 6}, seven);
  std::map<uint32_t, int> voters;
  for (uint32_t s = 0; s < shards.size(); ++s) {
    EXPECT_EQ(DistinctZones(shards[s].voters, seven), 3u) << "shard " << s;
    for (uint32_t node : shards[s].voters) ++voters[node];
  }
  EXPECT_NEAR(voters[6], 1024 / 3, 1) << "zone b's three nodes share its shards";
  EXPECT_NEAR(voters[2], 1024 / 3, 1);
  EXPECT_NEAR(voters[0], 512, 1) << "zone a keeps what it had";
}

}  // namespace
}  // namespace dedup::server::replication
