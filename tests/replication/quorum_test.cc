#include "server/replication/quorum.h"

#include "gtest/gtest.h"

namespace dedup::server::replication {
namespace {

TEST(MajorityTest, IsMoreThanHalf) {
  EXPECT_EQ(Majority(1), 1u);
  EXPECT_EQ(Majority(3), 2u);
  EXPECT_EQ(Majority(4), 3u);
  EXPECT_EQ(Majority(5), 3u);
}

TEST(MajorityHoldsTest, IsWhatTheMajoritysLeastAdvancedHolds) {
  EXPECT_EQ(MajorityHolds({0, 1, 2}, {{0, 10}, {1, 7}, {2, 3}}), 7u);
  EXPECT_EQ(MajorityHolds({0, 1, 2, 3}, {{0, 10}, {1, 7}, {2, 3}, {3, 9}}), 7u);
}

TEST(MajorityHoldsTest, CountsOnlyVoters) {
  // Node 9 is a learner: what it holds commits nothing.
  EXPECT_EQ(MajorityHolds({0, 1, 2}, {{0, 10}, {9, 10}}), 0u);
}

TEST(EveryMajorityHoldsTest, NeedsMoreHoldersThanVotersOutsideAMajority) {
  // Of four voters, any three are a majority: two holders meet every one.
  EXPECT_TRUE(EveryMajorityHolds({0, 1, 2, 3}, {{0, 5}, {2, 5}}, 5));
  // Of three voters, {1, 2} is a majority that misses a lone holder.
  EXPECT_FALSE(EveryMajorityHolds({0, 1, 2}, {{0, 5}, {1, 4}, {2, 4}}, 5));
  EXPECT_TRUE(EveryMajorityHolds({0, 1, 2}, {{0, 5}, {1, 6}}, 5));
}

TEST(NextCommitTest, MovesOnlyForwardAndOnlyToTheLeadersOwnEpoch) {
  EXPECT_EQ(NextCommit(5, 9, 3), 9u);
  EXPECT_EQ(NextCommit(5, 4, 3), 5u);
  // Entries 6-9 are an older epoch's, the leader's first is 10: not yet.
  EXPECT_EQ(NextCommit(5, 9, 10), 5u);
}

TEST(BallotTest, IsWonOnceAMajorityPromises) {
  Ballot ballot({0, 1, 2}, 0, {3, 10});
  EXPECT_EQ(ballot.outcome(), Ballot::Outcome::kPending);
  ballot.Granted(2, {4, 12});
  EXPECT_EQ(ballot.outcome(), Ballot::Outcome::kWon);
  EXPECT_EQ(ballot.best_node(), 2u);
  EXPECT_EQ(ballot.best(), (Position{4, 12}));
}

TEST(BallotTest, IsLostAsSoonAsNoMajorityIsLeftWithoutWaitingForASilentVoter) {
  Ballot ballot({0, 1, 2, 3, 4}, 0, {3, 10});
  ballot.Refused(1, 7);
  ballot.Refused(2, 6);
  EXPECT_EQ(ballot.outcome(), Ballot::Outcome::kPending);
  ballot.Refused(3, 5);
  // Node 4 is hung and will never answer: the outcome is known already.
  EXPECT_EQ(ballot.outcome(), Ballot::Outcome::kLost);
  EXPECT_EQ(ballot.refused_epoch(), 7u);
}

TEST(BallotTest, CountsEachVoterOnceAndNoOneElse) {
  Ballot ballot({0, 1, 2, 3, 4}, 0, {1, 1});
  ballot.Granted(1, {1, 1});
  ballot.Granted(1, {1, 1});  // A duplicated answer.
  ballot.Granted(7, {1, 1});  // Not a voter.
  EXPECT_EQ(ballot.granted(), 2u);
  EXPECT_EQ(ballot.outcome(), Ballot::Outcome::kPending);
  ballot.Unanswered(2);
  ballot.Unanswered(3);
  EXPECT_EQ(ballot.outcome(), Ballot::Outcome::kPending);
  ballot.Refused(4, 0);
  EXPECT_EQ(ballot.outcome(), Ballot::Outcome::kLost);
}

}  // namespace
}  // namespace dedup::server::replication
