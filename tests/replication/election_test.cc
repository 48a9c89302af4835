// A replica's election rules (server/replication/election.h).

#include "server/replication/election.h"

#include "gtest/gtest.h"
#include "server/replication/timing.h"

namespace dedup::server::replication {
namespace {

constexpr absl::Duration kTtl = absl::Seconds(3);

TEST(StandWaitTest, TheFirstVoterStandsAtOnceAndTheOthersInTurn) {
  EXPECT_EQ(StandWait(0, -1, 5, kTtl), absl::ZeroDuration());
  EXPECT_EQ(StandWait(1, -1, 5, kTtl), Tick(kTtl) * 2);
  EXPECT_EQ(StandWait(2, -1, 5, kTtl), Tick(kTtl) * 2 + kTtl / 2);
}

TEST(StandWaitTest, AHandOffsTargetStandsAtOnceAndTheOthersLater) {
  EXPECT_EQ(StandWait(2, 5, 5, kTtl), absl::ZeroDuration());
  EXPECT_EQ(StandWait(0, 4, 5, kTtl), kTtl / 2);
  EXPECT_EQ(StandWait(1, 4, 5, kTtl), Tick(kTtl) * 2 + kTtl / 2);
}

TEST(StickyTest, AReplicaThatHeardALeaderLatelyPromisesNoOtherCandidate) {
  const HeardLeader heard{/*node=*/1, /*epoch=*/7, /*ago=*/Stickiness(kTtl) / 2};
  EXPECT_TRUE(Sticky(heard, 2, 0, kTtl));
  // The leader itself may stand again: it stopped leading first.
  EXPECT_FALSE(Sticky(heard, 1, 0, kTtl));
  // Long enough ago, the leader's read lease has ended.
  EXPECT_FALSE(Sticky({1, 7, Stickiness(kTtl)}, 2, 0, kTtl));
  // Nobody heard since a start without a promise.
  EXPECT_FALSE(Sticky({}, 2, 0, kTtl));
}

TEST(StickyTest, AHandOffFreesTheLeadersFollowersButNotThoseOfALaterLeader) {
  const HeardLeader heard{1, 7, absl::Milliseconds(10)};
  EXPECT_FALSE(Sticky(heard, 2, 7, kTtl));
  EXPECT_FALSE(Sticky(heard, 2, 9, kTtl));
  EXPECT_TRUE(Sticky(heard, 2, 6, kTtl));
}

TEST(StickyTest, AReplicaJustStartedWaitsForAnyLeaderItMayHaveHeard) {
  const HeardLeader unknown{-2, 7, absl::Milliseconds(10)};
  EXPECT_TRUE(Sticky(unknown, 2, 0, kTtl));
  EXPECT_TRUE(Sticky(unknown, 1, 6, kTtl));
  EXPECT_FALSE(Sticky(unknown, 2, 7, kTtl));
}

TEST(DecidePromiseTest, GrantsOnlyAVoterThatNeitherLeadsNorIsStickyNorPromisedLater) {
  PromiseFacts facts;
  facts.epoch = 8;
  facts.promised = 7;
  facts.voter = true;
  EXPECT_EQ(DecidePromise(facts), PromiseAnswer::kGrant);
  PromiseFacts later = facts;
  later.promised = 8;
  EXPECT_EQ(DecidePromise(later), PromiseAnswer::kPromisedLater);
  PromiseFacts sticky = facts;
  sticky.sticky = true;
  EXPECT_EQ(DecidePromise(sticky), PromiseAnswer::kSticky);
  PromiseFacts leading = sticky;
  leading.leading = true;
  EXPECT_EQ(DecidePromise(leading), PromiseAnswer::kLeading);
  PromiseFacts reseeding = leading;
  reseeding.reseeding = true;
  EXPECT_EQ(DecidePromise(reseeding), PromiseAnswer::kReseeding);
  PromiseFacts learner = reseeding;
  learner.voter = false;
  EXPECT_EQ(DecidePromise(learner), PromiseAnswer::kNotVoter);
}

// An idle replica told of a hand-off at epoch 7, knowing of nothing later.
NoticeFacts NoticeAtSeven() {
  NoticeFacts facts;
  facts.epoch = 7;
  facts.replica = true;
  facts.known_epoch = 7;
  facts.heard_epoch = 7;
  facts.promised = 7;
  return facts;
}

TEST(TakesHandOffNoticeTest, ATargetTakesANoticeAsRecentAsAllItKnowsOfTheShard) {
  const NoticeFacts facts = NoticeAtSeven();
  EXPECT_TRUE(TakesHandOffNotice(facts));
  // The leader that handed over is the last the target heard of, and the
  // shard's epoch is still the one it wrote.
  NoticeFacts older_leader = facts;
  older_leader.known_epoch = 5;
  older_leader.heard_epoch = 6;
  older_leader.promised = 6;
  EXPECT_TRUE(TakesHandOffNotice(older_leader));
}

TEST(TakesHandOffNoticeTest, ALateNoticeIsIgnored) {
  const NoticeFacts facts = NoticeAtSeven();
  // A later leader was named in etcd, or appended here.
  NoticeFacts named_later = facts;
  named_later.known_epoch = 8;
  EXPECT_FALSE(TakesHandOffNotice(named_later));
  NoticeFacts heard_later = facts;
  heard_later.heard_epoch = 8;
  EXPECT_FALSE(TakesHandOffNotice(heard_later));
  // Another candidate asked for epoch 8: standing for 9 now would fence it.
  NoticeFacts promised_later = facts;
  promised_later.promised = 8;
  EXPECT_FALSE(TakesHandOffNotice(promised_later));
}

TEST(TakesHandOffNoticeTest, OnlyAnIdleReplicaOfTheShardTakesANotice) {
  const NoticeFacts facts = NoticeAtSeven();
  NoticeFacts busy = facts;
  busy.busy = true;
  EXPECT_FALSE(TakesHandOffNotice(busy));
  NoticeFacts not_replica = facts;
  not_replica.replica = false;
  EXPECT_FALSE(TakesHandOffNotice(not_replica));
}

TEST(ShouldHandBackTest, OnceTheFirstVoterHasAnsweredSteadilyForALease) {
  HandBackFacts facts;
  facts.serving = true;
  facts.first_is_peer = true;
  facts.first_silent_for = Tick(kTtl);
  facts.first_live_for = kTtl;
  facts.leading_for = kTtl;
  EXPECT_TRUE(ShouldHandBack(facts, kTtl));
  HandBackFacts silent = facts;
  silent.first_silent_for = Tick(kTtl) * 3;
  EXPECT_FALSE(ShouldHandBack(silent, kTtl));
  HandBackFacts just_back = facts;
  just_back.first_live_for = kTtl / 2;
  EXPECT_FALSE(ShouldHandBack(just_back, kTtl));
  HandBackFacts just_won = facts;
  just_won.leading_for = kTtl / 2;
  EXPECT_FALSE(ShouldHandBack(just_won, kTtl));
  HandBackFacts moving = facts;
  moving.moving = true;
  EXPECT_FALSE(ShouldHandBack(moving, kTtl));
  HandBackFacts not_serving = facts;
  not_serving.serving = false;
  EXPECT_FALSE(ShouldHandBack(not_serving, kTtl));
}

}  // namespace
}  // namespace dedup::server::replication
