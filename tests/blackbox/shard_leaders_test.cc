// How the replication tests read leadership from Topology answers, and how
// they time a shard's gaps without a leader.
#include "tests/blackbox/shard_leaders.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dedup::blackbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A replicated node's answer: per shard, the leader it knows and the epoch.
v1::TopologyResponse Replicated(int node, std::vector<std::pair<int, uint64_t>> leaders) {
  v1::TopologyResponse answer;
  answer.set_node_index(node);
  answer.set_shard_count(static_cast<uint32_t>(leaders.size()));
  answer.set_replication_factor(3);
  for (int i = 0; i < 3; ++i) answer.add_nodes("127.0.0.1:" + std::to_string(7400 + i));
  for (size_t shard = 0; shard < leaders.size(); ++shard) {
    v1::ShardLeader* leader = answer.add_leaders();
    leader->set_shard(static_cast<uint32_t>(shard));
    leader->set_leader(leaders[shard].first);
    leader->set_epoch(leaders[shard].second);
  }
  return answer;
}

TEST(LeadersOfTest, ANodeLeadsAShardWhenItNamesItselfAtTheNewestEpoch) {
  const TopologyAnswers answers = {Replicated(0, {{0, 1}, {1, 1}}), Replicated(1, {{0, 1}, {1, 1}}),
                                   Replicated(2, {{0, 1}, {1, 1}})};
  EXPECT_THAT(LeadersOf(answers, 2), ElementsAre(Leadership{0, 1}, Leadership{1, 1}));
}

TEST(LeadersOfTest, AShardIsUnledWhileItsNewestLeaderHasNotAnswered) {
  // Node 0 still believes it leads shard 0 at epoch 1; node 1 knows node 2
  // was elected at epoch 2, but node 2 did not answer.
  const TopologyAnswers answers = {Replicated(0, {{0, 1}}), Replicated(1, {{2, 2}}), std::nullopt};
  EXPECT_THAT(LeadersOf(answers, 1), ElementsAre(Leadership{-1, 0}));
}

TEST(LeadersOfTest, AShardIsUnledWhileNoAnswerNamesALeader) {
  const TopologyAnswers answers = {Replicated(0, {{-1, 3}}), Replicated(1, {{-1, 3}}),
                                   std::nullopt};
  EXPECT_THAT(LeadersOf(answers, 1), ElementsAre(Leadership{-1, 0}));
}

TEST(LeadersOfTest, ADeadLeaderLeavesItsShardsUnled) {
  const TopologyAnswers answers = {std::nullopt, Replicated(1, {{0, 4}, {1, 4}}),
                                   Replicated(2, {{0, 4}, {1, 4}})};
  EXPECT_THAT(LeadersOf(answers, 2), ElementsAre(Leadership{-1, 0}, Leadership{1, 4}));
}

TEST(LeadersOfTest, TheOwnersOfAStaticallyShardedClusterLeadAtEpochZero) {
  TopologyAnswers answers;
  for (int node = 0; node < 3; ++node) {
    v1::TopologyResponse answer;
    answer.set_node_index(node);
    answer.set_shard_count(4);
    for (int i = 0; i < 3; ++i) answer.add_nodes("127.0.0.1:" + std::to_string(7400 + i));
    answers.push_back(node == 1 ? std::nullopt : std::optional(answer));
  }
  EXPECT_THAT(LeadersOf(answers, 4),
              ElementsAre(Leadership{0, 0}, Leadership{-1, 0}, Leadership{2, 0}, Leadership{0, 0}));
}

TEST(LeadershipConflictsTest, TwoNodesClaimingOneShardAtOneEpochAreAConflict) {
  const TopologyAnswers answers = {Replicated(0, {{0, 5}, {1, 2}}), Replicated(1, {{1, 5}, {1, 2}}),
                                   Replicated(2, {{0, 5}, {1, 2}})};
  EXPECT_THAT(LeadershipConflicts(answers, 2),
              ElementsAre(HasSubstr("shard 0: nodes 0 and 1 both lead it at epoch 5")));
}

TEST(LeadershipConflictsTest, AnOldLeaderBehindANewerEpochIsNoConflict) {
  const TopologyAnswers answers = {Replicated(0, {{0, 5}}), Replicated(1, {{1, 6}}),
                                   Replicated(2, {{1, 6}})};
  EXPECT_THAT(LeadershipConflicts(answers, 1), IsEmpty());
  EXPECT_THAT(LeadersOf(answers, 1), ElementsAre(Leadership{1, 6}));
}

client::SteadyTime At(int ms) { return client::SteadyTime::FromOrigin(absl::Milliseconds(ms)); }

TEST(LeaderlessTimesTest, AGapRunsFromTheLastObservationWithALeaderToTheFirstWithOneAgain) {
  LeaderlessTimes times(2);
  times.Observe(At(0), {{0, 1}, {1, 1}});
  times.Observe(At(100), {{-1, 0}, {1, 1}});
  times.Observe(At(300), {{-1, 0}, {1, 1}});
  times.Observe(At(350), {{2, 2}, {1, 1}});
  times.Observe(At(400), {{-1, 0}, {1, 1}});
  times.Observe(At(450), {{2, 3}, {1, 1}});

  const LeaderlessTimes::Shard& failed_over = times.shards()[0];
  EXPECT_EQ(failed_over.gaps, 2);
  EXPECT_EQ(failed_over.total, absl::Milliseconds(350));
  EXPECT_EQ(failed_over.longest, absl::Milliseconds(300));
  EXPECT_EQ(failed_over.leader_changes, 2);  // Node 0 to node 2, then epoch 2 to 3.
  const LeaderlessTimes::Shard& steady = times.shards()[1];
  EXPECT_EQ(steady.gaps, 0);
  EXPECT_EQ(steady.total, absl::ZeroDuration());
  EXPECT_EQ(steady.leader_changes, 0);
  EXPECT_THAT(times.Report(), HasSubstr("shard 0: no leader for 350ms in 2 gap(s), the longest "
                                        "300ms; 2 change(s) of leader"));
}

}  // namespace
}  // namespace dedup::blackbox
