#include "server/replication/move_rule.h"

#include "gtest/gtest.h"

namespace dedup::server::replication {
namespace {

// Shard with voters {A=0, B=1, C=2}, led by A, moving C to D=3.
MoveFacts Moving(MoveFacts::State state) {
  MoveFacts f;
  f.state = state;
  f.self = 0;
  f.from = 2;
  f.to = 3;
  if (state == MoveFacts::State::kAdding) {
    f.voters = {0, 1, 2};
    f.learners = {3};
  } else {
    f.voters = {0, 1, 2, 3};
  }
  f.last_seq = 1000;
  f.commit_seq = 1000;
  for (uint32_t peer : {1u, 2u, 3u}) {
    f.match[peer] = 1000;
    f.silent_for[peer] = absl::Milliseconds(100);
  }
  return f;
}

TEST(MoveRuleTest, PromotesATargetThatHoldsEveryCommittedEntry) {
  MoveFacts f = Moving(MoveFacts::State::kAdding);
  f.last_seq = 1100;  // 100 entries past the commit point are still in flight.
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kPromote);
}

TEST(MoveRuleTest, DoesNotPromoteATargetThatLacksCommittedEntries) {
  // The interleaving that lost acknowledged writes: B slow, 900-1000
  // committed on {A, C}, D at 850.
  MoveFacts f = Moving(MoveFacts::State::kAdding);
  f.match[1] = 900;
  f.match[3] = 850;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kWait);
}

TEST(MoveRuleTest, DoesNotRemoveTheSourceWhileTheNewVotersMajorityLacksCommittedEntries) {
  // D was promoted; B is slow; C (the source) and A hold 1000.
  MoveFacts f = Moving(MoveFacts::State::kPromoted);
  f.match[1] = 900;
  f.match[3] = 999;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kWait);
  // {A, B, D}: A and D hold the commit point once D catches up.
  f.match[3] = 1000;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kRemove);
}

TEST(MoveRuleTest, RemovesOnceAMajorityOfTheNewVotersHoldsTheCommitPoint) {
  MoveFacts f = Moving(MoveFacts::State::kPromoted);
  f.match[2] = 0;  // The source itself may be anywhere: it is leaving.
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kRemove);
  EXPECT_EQ(VotersAfterRemoval(f.voters, 2, 3), (std::vector<uint32_t>{0, 1, 3}));
}

TEST(MoveRuleTest, WaitsForATargetThatStoppedAnswering) {
  MoveFacts f = Moving(MoveFacts::State::kPromoted);
  f.silent_for[3] = absl::Seconds(5);
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kWait);
  f.silent_for.erase(3);
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kWait);
}

TEST(MoveRuleTest, ASourceThatLeadsHandsTheShardOff) {
  MoveFacts f = Moving(MoveFacts::State::kPromoted);
  f.from = 0;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kHandOff);
}

TEST(MoveRuleTest, ASourceThatLeadsWaitsUntilAReseededTargetMayStand) {
  MoveFacts f = Moving(MoveFacts::State::kPromoted);
  f.from = 0;
  f.target_may_stand = false;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kWait);
  f.target_kept_from_standing_for = absl::Seconds(2);
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kWait);
  // The target's re-seed is done: the step goes on.
  f.target_may_stand = true;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kHandOff);
}

// A re-seed key that nothing will remove (its node lost the shard before
// it caught up) slows the hand-off by a lease at most, never stops it.
TEST(MoveRuleTest, ASourceHandsOffAfterALeaseEvenIfTheTargetStillCannotStand) {
  MoveFacts f = Moving(MoveFacts::State::kPromoted);
  f.from = 0;
  f.target_may_stand = false;
  f.target_kept_from_standing_for = f.lease_ttl;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kHandOff);
}

TEST(MoveRuleTest, WaitsUntilThePromotionIsInThePlacement) {
  MoveFacts f = Moving(MoveFacts::State::kPromoted);
  f.voters = {0, 1, 2};
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kWait);
}

TEST(MoveRuleTest, RollsBackATargetGoneForThreeLeases) {
  MoveFacts f = Moving(MoveFacts::State::kAdding);
  f.target_live = false;
  f.target_gone_for = f.lease_ttl * 2;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kWait);
  f.target_gone_for = f.lease_ttl * 3;
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kRollBack);
}

TEST(MoveRuleTest, RollsBackWhenThePlacementLostItsLearner) {
  MoveFacts f = Moving(MoveFacts::State::kAdding);
  f.learners.clear();
  EXPECT_EQ(DecideMoveStep(f), MoveStep::kRollBack);
}

}  // namespace
}  // namespace dedup::server::replication
