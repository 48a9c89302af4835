// When a failed attempt of a call is sent again, and after how long.
#include "client/src/retry_policy.h"

#include "gtest/gtest.h"

namespace dedup::client {
namespace {

constexpr absl::Duration kInitial = absl::Milliseconds(10);
constexpr absl::Duration kMax = absl::Milliseconds(50);

const SteadyTime kNow = SteadyTime::FromOrigin(absl::Seconds(100));
const SteadyTime kFarDeadline = kNow + absl::Hours(1);

TEST(RetryPolicyTest, UnavailableWaitsAJitteredBackoffThatDoublesUpToTheMax) {
  const RetryPolicy policy(kInitial, kMax);
  RetryPolicy::State state = policy.Start();
  for (absl::Duration backoff :
       {absl::Milliseconds(10), absl::Milliseconds(20), absl::Milliseconds(40),
        absl::Milliseconds(50), absl::Milliseconds(50)}) {
    const RetryPolicy::Decision next =
        policy.Next(absl::UnavailableError("down"), kNow, kFarDeadline, &state);
    ASSERT_EQ(next.action, RetryPolicy::Action::kRetry);
    EXPECT_GE(next.wait, backoff / 2);
    EXPECT_LE(next.wait, backoff);
  }
}

TEST(RetryPolicyTest, UnavailableIsReturnedWhenTheWaitWouldEndAtOrPastTheDeadline) {
  const RetryPolicy policy(kInitial, kMax);
  RetryPolicy::State state = policy.Start();
  // The first wait is 5 to 10 ms.
  EXPECT_EQ(policy.Next(absl::UnavailableError("down"), kNow, kNow + absl::Milliseconds(5), &state)
                .action,
            RetryPolicy::Action::kReturn);
  EXPECT_EQ(policy.Next(absl::UnavailableError("down"), kNow, kNow + absl::Milliseconds(11), &state)
                .action,
            RetryPolicy::Action::kRetry);
}

TEST(RetryPolicyTest, FailedPreconditionReroutesAtOnceTheFirstTime) {
  const RetryPolicy policy(kInitial, kMax);
  RetryPolicy::State state = policy.Start();
  const RetryPolicy::Decision next = policy.Next(
      absl::FailedPreconditionError("key belongs to node 1"), kNow, kFarDeadline, &state);
  EXPECT_EQ(next.action, RetryPolicy::Action::kReroute);
  EXPECT_EQ(next.wait, absl::ZeroDuration());
}

// Leadership can move several times while one call is sent: the call
// follows it for as long as its deadline allows, waiting more each time.
TEST(RetryPolicyTest, FailedPreconditionReroutesAgainAfterABackoffUntilTheDeadline) {
  const RetryPolicy policy(kInitial, kMax);
  RetryPolicy::State state = policy.Start();
  const absl::Status moved = absl::FailedPreconditionError("shard 3 is led by node 2");
  ASSERT_EQ(policy.Next(moved, kNow, kFarDeadline, &state).action, RetryPolicy::Action::kReroute);
  for (absl::Duration backoff :
       {absl::Milliseconds(10), absl::Milliseconds(20), absl::Milliseconds(40),
        absl::Milliseconds(50), absl::Milliseconds(50), absl::Milliseconds(50)}) {
    const RetryPolicy::Decision next = policy.Next(moved, kNow, kFarDeadline, &state);
    ASSERT_EQ(next.action, RetryPolicy::Action::kReroute);
    EXPECT_GE(next.wait, backoff / 2);
    EXPECT_LE(next.wait, backoff);
  }
  // The next wait is 25 to 50 ms: not before a deadline 20 ms away.
  EXPECT_EQ(policy.Next(moved, kNow, kNow + absl::Milliseconds(20), &state).action,
            RetryPolicy::Action::kReturn);
}

TEST(RetryPolicyTest, UnavailableAndFailedPreconditionShareOneBackoff) {
  const RetryPolicy policy(kInitial, kMax);
  RetryPolicy::State state = policy.Start();
  ASSERT_EQ(policy.Next(absl::UnavailableError("no leader"), kNow, kFarDeadline, &state).action,
            RetryPolicy::Action::kRetry);
  ASSERT_EQ(policy.Next(absl::UnavailableError("no leader"), kNow, kFarDeadline, &state).action,
            RetryPolicy::Action::kRetry);
  // The first reroute goes at once; the one after waits as a third retry.
  const absl::Status moved = absl::FailedPreconditionError("moved");
  EXPECT_EQ(policy.Next(moved, kNow, kFarDeadline, &state).wait, absl::ZeroDuration());
  const RetryPolicy::Decision next = policy.Next(moved, kNow, kFarDeadline, &state);
  EXPECT_GE(next.wait, absl::Milliseconds(20));
  EXPECT_LE(next.wait, absl::Milliseconds(40));
}

TEST(RetryPolicyTest, FailedPreconditionAtTheDeadlineIsReturned) {
  const RetryPolicy policy(kInitial, kMax);
  RetryPolicy::State state = policy.Start();
  EXPECT_EQ(policy.Next(absl::FailedPreconditionError("moved"), kNow, kNow, &state).action,
            RetryPolicy::Action::kReturn);
}

TEST(RetryPolicyTest, OtherErrorsAreReturnedAtOnce) {
  const RetryPolicy policy(kInitial, kMax);
  for (const absl::Status& error :
       {absl::InvalidArgumentError("key: empty"), absl::DeadlineExceededError("late"),
        absl::NotFoundError("no namespace"), absl::AbortedError("aborted"),
        absl::InternalError("bug")}) {
    RetryPolicy::State state = policy.Start();
    EXPECT_EQ(policy.Next(error, kNow, kFarDeadline, &state).action, RetryPolicy::Action::kReturn)
        << error;
  }
}

}  // namespace
}  // namespace dedup::client
