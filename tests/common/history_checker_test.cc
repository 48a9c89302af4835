// The history checker finds each kind of broken promise, and accepts
// histories where answers were lost or calls overlapped.

#include "tests/common/history_checker.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dedup::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Answer = HistoryOp::Answer;
using Kind = HistoryOp::Kind;

HistoryOp Claim(const std::string& owner, int64_t invoked, int64_t returned, Answer answer,
                uint64_t token = 0, const std::string& result = "") {
  return HistoryOp{Kind::kClaim, "ns/k", owner, token, result, invoked, returned, answer};
}

HistoryOp Complete(const std::string& owner, int64_t invoked, int64_t returned, Answer answer,
                   uint64_t token, const std::string& result) {
  return HistoryOp{Kind::kComplete, "ns/k", owner, token, result, invoked, returned, answer};
}

TEST(HistoryCheckerTest, AcceptsClaimCompleteThenDuplicatesReplayingTheResult) {
  EXPECT_THAT(CheckHistory({
                  Claim("a", 0, 1, Answer::kAcquired, 7),
                  Claim("b", 0, 2, Answer::kInProgress),  // Overlapping copy.
                  Complete("a", 2, 3, Answer::kOk, 7, "charged"),
                  Claim("c", 4, 5, Answer::kCompleted, 7, "charged"),
                  Complete("a", 6, 7, Answer::kAlreadyCompleted, 7, "charged"),
              }),
              IsEmpty());
}

TEST(HistoryCheckerTest, AcceptsATakeoverWithALargerTokenAndLostAnswers) {
  EXPECT_THAT(CheckHistory({
                  Claim("a", 0, 1, Answer::kAcquired, 7),
                  Claim("a", 2, 3, Answer::kAcquired, 7),  // Re-entrant retry.
                  Complete("a", 3, 9, Answer::kNone, 7, "lost?"),
                  Claim("b", 10, 11, Answer::kAcquired, 8),  // Lease ran out first.
                  Complete("a", 12, 13, Answer::kStaleToken, 7, "late"),
                  Complete("b", 14, 15, Answer::kOk, 8, "charged"),
              }),
              IsEmpty());
}

TEST(HistoryCheckerTest, FindsTwoOwnersHoldingOneToken) {
  EXPECT_THAT(CheckHistory({
                  Claim("a", 0, 1, Answer::kAcquired, 7),
                  Claim("b", 0, 2, Answer::kAcquired, 7),
              }),
              ElementsAre(HasSubstr("token 7 was ACQUIRED by a and by b")));
}

TEST(HistoryCheckerTest, FindsATokenThatWentBackwards) {
  const std::vector<std::string> violations = CheckHistory({
      Claim("a", 0, 1, Answer::kAcquired, 9),
      Claim("b", 5, 6, Answer::kAcquired, 8),
  });
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_THAT(violations[0], HasSubstr("token did not grow"));
}

TEST(HistoryCheckerTest, OverlappingClaimsMayTakeEffectInEitherOrder) {
  // b was sent before a's answer arrived: b may have taken effect first.
  EXPECT_THAT(CheckHistory({
                  Claim("a", 0, 5, Answer::kAcquired, 9),
                  Claim("b", 4, 6, Answer::kAcquired, 8),
              }),
              IsEmpty());
}

TEST(HistoryCheckerTest, FindsALostAcknowledgedCompletion) {
  const std::vector<std::string> violations = CheckHistory({
      Claim("a", 0, 1, Answer::kAcquired, 7), Complete("a", 2, 3, Answer::kOk, 7, "charged"),
      Claim("b", 4, 5, Answer::kAcquired, 8),  // Charged twice.
  });
  EXPECT_THAT(violations, ::testing::Contains(HasSubstr("acknowledged completion lost")));
}

TEST(HistoryCheckerTest, FindsAReplayOfTheWrongResult) {
  const std::vector<std::string> violations = CheckHistory({
      Claim("a", 0, 1, Answer::kAcquired, 7),
      Complete("a", 2, 3, Answer::kOk, 7, "charged"),
      Claim("b", 4, 5, Answer::kCompleted, 7, "refunded"),
  });
  EXPECT_THAT(violations, ::testing::Contains(HasSubstr("replayed token 7 result 'refunded'")));
  EXPECT_THAT(violations, ::testing::Contains(HasSubstr("that no Complete sent")));
}

TEST(HistoryCheckerTest, FindsACompletionOfATokenNoClaimAcquired) {
  EXPECT_THAT(CheckHistory({Complete("forger", 0, 1, Answer::kOk, 42, "forged")}),
              ElementsAre(HasSubstr("OK for a token no claim acquired")));
}

TEST(HistoryCheckerTest, FindsTwoTokensBothCompleted) {
  const std::vector<std::string> violations = CheckHistory({
      Claim("a", 0, 1, Answer::kAcquired, 7),
      Claim("b", 0, 2, Answer::kAcquired, 8),
      Complete("a", 3, 4, Answer::kOk, 7, "x"),
      Complete("b", 3, 5, Answer::kOk, 8, "y"),
  });
  EXPECT_THAT(violations, ::testing::Contains(HasSubstr("2 different tokens were answered OK")));
}

TEST(HistoryCheckerTest, KeysAreCheckedApart) {
  HistoryOp other = Claim("b", 5, 6, Answer::kAcquired, 1);
  other.key = "ns/other";
  EXPECT_THAT(CheckHistory({Claim("a", 0, 1, Answer::kAcquired, 9), other}), IsEmpty());
}

}  // namespace
}  // namespace dedup::test
