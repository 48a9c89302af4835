// How the replication tests turn the field experiment's guard runs into
// the calls the history checker reads.
#include "tests/blackbox/pipeline_history.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dedup::blackbox {
namespace {

using ::dedup::client::GuardOutcome;
using ::dedup::client::GuardResult;
using ::dedup::test::CheckHistory;
using ::dedup::test::HistoryOp;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;

client::SteadyTime At(int ms) { return client::SteadyTime::FromOrigin(absl::Milliseconds(ms)); }
int64_t Ns(int ms) { return int64_t{ms} * 1'000'000; }

GuardResult Outcome(GuardOutcome outcome, std::string result = "") {
  GuardResult out;
  out.outcome = outcome;
  out.result = std::move(result);
  return out;
}

// A run whose side effect charged `key` with `token` between 20 and 30 ms.
examples::GuardRunTrace Executed(const std::string& key, const std::string& owner, uint64_t token,
                                 int start_ms = 10) {
  examples::GuardRunTrace trace;
  trace.key = key;
  trace.owner = owner;
  trace.started = At(start_ms);
  trace.worked = true;
  trace.token = token;
  trace.work_started = At(start_ms + 10);
  trace.work_finished = At(start_ms + 20);
  trace.work = examples::ChargeReceipt(key, token);
  trace.finished = At(start_ms + 30);
  trace.result = Outcome(GuardOutcome::kExecuted, *trace.work);
  return trace;
}

// A run that found the key completed with the receipt of `token`.
examples::GuardRunTrace Duplicate(const std::string& key, const std::string& owner, uint64_t token,
                                  int start_ms) {
  examples::GuardRunTrace trace;
  trace.key = key;
  trace.owner = owner;
  trace.started = At(start_ms);
  trace.finished = At(start_ms + 5);
  trace.result = Outcome(GuardOutcome::kDuplicate, examples::ChargeReceipt(key, token));
  return trace;
}

TEST(PipelineHistoryTest, AnExecutedRunIsAnAcquiredClaimThenAnAcknowledgedComplete) {
  PipelineHistory history;
  history.Add(Executed("pay-1", "worker-0", 7));

  const std::vector<HistoryOp> ops = history.Ops();
  ASSERT_THAT(ops, SizeIs(2));
  EXPECT_EQ(ops[0].kind, HistoryOp::Kind::kClaim);
  EXPECT_EQ(ops[0].answer, HistoryOp::Answer::kAcquired);
  EXPECT_EQ(ops[0].token, 7u);
  EXPECT_EQ(ops[0].owner, "worker-0");
  EXPECT_EQ(ops[0].invoked, Ns(10));
  EXPECT_EQ(ops[0].returned, Ns(20));  // The side effect began: the Claim was answered.
  EXPECT_EQ(ops[1].kind, HistoryOp::Kind::kComplete);
  EXPECT_EQ(ops[1].answer, HistoryOp::Answer::kOk);
  EXPECT_EQ(ops[1].token, 7u);
  EXPECT_EQ(ops[1].result, "charged pay-1 with token 7");
  EXPECT_EQ(ops[1].invoked, Ns(30));  // The side effect ended: Complete not sent before.
  EXPECT_EQ(ops[1].returned, Ns(40));
  EXPECT_THAT(history.Acknowledged(), ElementsAre(Pair("pay-1", "charged pay-1 with token 7")));
  EXPECT_EQ(history.runs(), 1);
}

TEST(PipelineHistoryTest, ADuplicateIsACompletedClaimWithTheTokenItsReceiptNames) {
  PipelineHistory history;
  history.Add(Duplicate("pay-1", "worker-3", 7, 50));

  const std::vector<HistoryOp> ops = history.Ops();
  ASSERT_THAT(ops, SizeIs(1));
  EXPECT_EQ(ops[0].answer, HistoryOp::Answer::kCompleted);
  EXPECT_EQ(ops[0].token, 7u);
  EXPECT_EQ(ops[0].result, "charged pay-1 with token 7");
  EXPECT_EQ(ops[0].invoked, Ns(50));
  EXPECT_EQ(ops[0].returned, Ns(55));
  EXPECT_THAT(history.Acknowledged(), IsEmpty());
}

TEST(PipelineHistoryTest, ARunThatFailedBeforeItsSideEffectIsAClaimWithoutAnswer) {
  PipelineHistory history;
  examples::GuardRunTrace trace;
  trace.key = "pay-1";
  trace.owner = "worker-0";
  trace.started = At(0);
  trace.finished = At(10'000);
  trace.result = absl::DeadlineExceededError("no leader");
  history.Add(trace);

  const std::vector<HistoryOp> ops = history.Ops();
  ASSERT_THAT(ops, SizeIs(1));
  EXPECT_EQ(ops[0].kind, HistoryOp::Kind::kClaim);
  EXPECT_EQ(ops[0].answer, HistoryOp::Answer::kNone);
}

TEST(PipelineHistoryTest, ARunWhoseCompleteGotNoAnswerIsNotAcknowledged) {
  PipelineHistory history;
  examples::GuardRunTrace trace = Executed("pay-1", "worker-0", 7);
  trace.result = absl::UnavailableError("leader died");
  history.Add(trace);

  const std::vector<HistoryOp> ops = history.Ops();
  ASSERT_THAT(ops, SizeIs(2));
  EXPECT_EQ(ops[1].kind, HistoryOp::Kind::kComplete);
  EXPECT_EQ(ops[1].answer, HistoryOp::Answer::kNone);
  EXPECT_THAT(history.Acknowledged(), IsEmpty());
}

TEST(PipelineHistoryTest, AFailedChargeSendsNoComplete) {
  PipelineHistory history;
  examples::GuardRunTrace trace = Executed("pay-1", "worker-0", 7);
  trace.work = absl::UnavailableError("provider timed out");
  trace.result = Outcome(GuardOutcome::kWorkFailed);
  history.Add(trace);

  const std::vector<HistoryOp> ops = history.Ops();
  ASSERT_THAT(ops, SizeIs(1));
  EXPECT_EQ(ops[0].answer, HistoryOp::Answer::kAcquired);
}

TEST(PipelineHistoryTest, TheCheckerPassesAConsistentRunAndCatchesALostCompletion) {
  PipelineHistory consistent;
  consistent.Add(Executed("pay-1", "worker-0", 7));
  consistent.Add(Duplicate("pay-1", "worker-1", 7, 100));
  EXPECT_THAT(CheckHistory(consistent.Ops()), IsEmpty());

  // After the acknowledged completion, a claim is handed the key again
  // with a new token: a failover lost the completion.
  PipelineHistory lost;
  lost.Add(Executed("pay-1", "worker-0", 7));
  lost.Add(Executed("pay-1", "worker-1", 9, 100));
  EXPECT_THAT(CheckHistory(lost.Ops()), SizeIs(testing::Ge(1u)));
}

TEST(ChargeReceiptTest, NamesTheTokenThatCharged) {
  EXPECT_EQ(examples::TokenOfReceipt(examples::ChargeReceipt("pay-run-7", 42)), 42u);
  EXPECT_EQ(examples::TokenOfReceipt("charged pay-1 with token "), std::nullopt);
  EXPECT_EQ(examples::TokenOfReceipt("refunded pay-1 with token 3"), std::nullopt);
}

TEST(PercentileTest, IsTheNearestRank) {
  std::vector<absl::Duration> samples;
  for (int ms = 100; ms >= 1; --ms) samples.push_back(absl::Milliseconds(ms));
  EXPECT_EQ(Percentile(samples, 0.5), absl::Milliseconds(50));
  EXPECT_EQ(Percentile(samples, 0.99), absl::Milliseconds(99));
  EXPECT_EQ(Percentile(samples, 1.0), absl::Milliseconds(100));
  EXPECT_EQ(Percentile({}, 0.99), absl::ZeroDuration());
}

}  // namespace
}  // namespace dedup::blackbox
