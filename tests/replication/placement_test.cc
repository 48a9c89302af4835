// The placement rules (server/replication/placement.h).

#include "server/replication/placement.h"

#include <map>
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

}  // namespace
}  // namespace dedup::server::replication
