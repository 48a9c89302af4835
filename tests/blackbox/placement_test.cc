// How the elastic tests read shard placement from Topology answers: which
// answer is the newest, when a placement is settled and when it is
// balanced.
#include "tests/blackbox/placement.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dedup::blackbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// An answer at `revision` placing shard s on voters[s], every node in
// `live` live.
v1::TopologyResponse Placed(uint64_t revision, std::vector<std::vector<uint32_t>> voters,
                            std::vector<uint32_t> live = {0, 1, 2, 3, 4}) {
  v1::TopologyResponse answer;
  answer.set_placement_revision(revision);
  answer.set_replication_factor(3);
  answer.set_shard_count(static_cast<uint32_t>(voters.size()));
  for (uint32_t node : live) answer.add_live_nodes(node);
  for (size_t shard = 0; shard < voters.size(); ++shard) {
    v1::ShardLeader* leader = answer.add_leaders();
    leader->set_shard(static_cast<uint32_t>(shard));
    for (uint32_t node : voters[shard]) leader->add_voters(node);
  }
  return answer;
}

TEST(NewestPlacementTest, IsTheAnswerWithTheHighestRevision) {
  const TopologyAnswers answers = {Placed(4, {{0, 1, 2}}), std::nullopt, Placed(7, {{1, 2, 3}}),
                                   Placed(5, {{0, 2, 3}})};
  const std::optional<v1::TopologyResponse> newest = NewestPlacement(answers);
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->placement_revision(), 7u);
  EXPECT_FALSE(NewestPlacement({std::nullopt, std::nullopt}).has_value());
}

TEST(VotersPerNodeTest, CountsEachNodesAppearancesAmongTheVoters) {
  const v1::TopologyResponse placement = Placed(1, {{0, 1, 2}, {1, 2, 3}, {2, 3, 0}});
  EXPECT_THAT(VotersPerNode(placement), ElementsAre(2, 2, 3, 2));
  EXPECT_THAT(VotersPerNode(placement, 5), ElementsAre(2, 2, 3, 2, 0));
}

TEST(UnsettledPlacementTest, AFullSetOfLiveVotersPerShardIsSettled) {
  EXPECT_EQ(UnsettledPlacement(Placed(1, {{0, 1, 2}, {1, 2, 3}}), 3), std::nullopt);
}

TEST(UnsettledPlacementTest, AMoveALearnerOrAShortOrDeadVoterSetIsNot) {
  v1::TopologyResponse moving = Placed(1, {{0, 1, 2}, {1, 2, 3}});
  moving.mutable_leaders(1)->mutable_move()->set_state("adding");
  EXPECT_THAT(UnsettledPlacement(moving, 3).value_or(""), HasSubstr("shard 1 is moving"));

  v1::TopologyResponse learning = Placed(1, {{0, 1, 2}});
  learning.mutable_leaders(0)->add_learners(3);
  EXPECT_THAT(UnsettledPlacement(learning, 3).value_or(""), HasSubstr("learners 3"));

  EXPECT_THAT(UnsettledPlacement(Placed(1, {{0, 1}}), 3).value_or(""), HasSubstr("voters 0,1"));
  EXPECT_THAT(UnsettledPlacement(Placed(1, {{0, 1, 1}}), 3).value_or(""),
              HasSubstr("not 3 distinct"));
  EXPECT_THAT(UnsettledPlacement(Placed(1, {{0, 1, 4}}, {0, 1, 2, 3}), 3).value_or(""),
              HasSubstr("voter 4, which is not live"));
  EXPECT_TRUE(UnsettledPlacement(v1::TopologyResponse(), 3).has_value());
}

TEST(ImbalanceTest, EveryNodeWithinOneOfTheMeanIsBalanced) {
  // 4 shards x 3 = 12 replicas over 5 nodes: a mean of 2.4, so 2 or 3 each.
  const v1::TopologyResponse placement = Placed(1, {{0, 1, 2}, {3, 4, 0}, {1, 2, 3}, {4, 0, 1}});
  EXPECT_THAT(VotersPerNode(placement), ElementsAre(3, 3, 2, 2, 2));
  EXPECT_THAT(Imbalance(placement, {0, 1, 2, 3, 4}), IsEmpty());
}

TEST(ImbalanceTest, ANodeTwoAwayFromTheMeanOrOutsideTheSetIsNot) {
  // Nodes 3 and 4 joined and got nothing: 0 against a mean of 2.4.
  const v1::TopologyResponse unmoved = Placed(1, {{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 1, 2}});
  EXPECT_THAT(Imbalance(unmoved, {0, 1, 2, 3, 4}), SizeIs(5));
  EXPECT_THAT(Imbalance(unmoved, {0, 1, 2}), IsEmpty());
  // Node 4 was removed but still votes.
  const v1::TopologyResponse left_behind = Placed(1, {{0, 1, 2}, {1, 2, 4}});
  EXPECT_THAT(Imbalance(left_behind, {0, 1, 2}),
              ElementsAre(HasSubstr("node 4 is not one of 0,1,2 but votes for 1")));
}

TEST(ShardInTest, FindsAShardsVotersAndLearners) {
  v1::TopologyResponse placement = Placed(1, {{0, 1, 2}, {1, 2, 3}});
  placement.mutable_leaders(1)->add_learners(4);
  const v1::ShardLeader* shard = ShardIn(placement, 1);
  ASSERT_NE(shard, nullptr);
  EXPECT_TRUE(VotesFor(*shard, 3));
  EXPECT_FALSE(VotesFor(*shard, 0));
  EXPECT_TRUE(LearnsFor(*shard, 4));
  EXPECT_FALSE(LearnsFor(*shard, -1));
  EXPECT_EQ(ShardIn(placement, 2), nullptr);
  EXPECT_THAT(DescribePlacement(placement), HasSubstr("shard 1: voters 1,2,3 learners 4"));
}

}  // namespace
}  // namespace dedup::blackbox
