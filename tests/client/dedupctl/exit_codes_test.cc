// dedupctl's table of outcomes and exit codes.
#include "exit_codes.h"

#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"

namespace dedup::ctl {
namespace {

using google::protobuf::EnumDescriptor;

struct AnswerEnum {
  Answer answer;
  const EnumDescriptor* descriptor;
};

std::vector<AnswerEnum> AnswerEnums() {
  return {{Answer::kClaimOutcome, v1::ClaimResponse::Outcome_descriptor()},
          {Answer::kCompleteOutcome, v1::CompleteResponse::Outcome_descriptor()},
          {Answer::kReleaseOutcome, v1::ReleaseResponse::Outcome_descriptor()},
          {Answer::kExtendOutcome, v1::ExtendResponse::Outcome_descriptor()},
          {Answer::kRecordState, v1::RecordState_descriptor()}};
}

// A new outcome in the API must get its exit code decided here, not fall
// through to a default.
TEST(ExitCodesTest, EveryOutcomeOfTheApiHasExactlyOneRowNamedAsPrinted) {
  size_t outcomes = 0;
  for (const AnswerEnum& e : AnswerEnums()) {
    for (int i = 0; i < e.descriptor->value_count(); ++i) {
      const google::protobuf::EnumValueDescriptor* value = e.descriptor->value(i);
      if (value->number() == 0) continue;  // *_UNSPECIFIED: never an answer.
      ++outcomes;
      const OutcomeExit* row = FindOutcome(e.answer, value->number());
      ASSERT_NE(row, nullptr) << value->full_name() << " has no exit code";
      EXPECT_EQ(std::string(row->name), value->name()) << value->full_name();
    }
  }
  EXPECT_EQ(OutcomeTable().size(), outcomes) << "a row for a value the API does not have";
}

TEST(ExitCodesTest, OutcomesGiveTheDocumentedExitCodes) {
  v1::ClaimResponse claim;
  claim.set_outcome(v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(ExitCodeOf(claim), 0);
  claim.set_outcome(v1::ClaimResponse::IN_PROGRESS);
  EXPECT_EQ(ExitCodeOf(claim), 10);
  claim.set_outcome(v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(ExitCodeOf(claim), 11);
  claim.set_outcome(v1::ClaimResponse::FAILED);
  EXPECT_EQ(ExitCodeOf(claim), 12);
  claim.set_outcome(v1::ClaimResponse::MISMATCH);
  EXPECT_EQ(ExitCodeOf(claim), 13);

  v1::CompleteResponse complete;
  complete.set_outcome(v1::CompleteResponse::OK);
  EXPECT_EQ(ExitCodeOf(complete), 0);
  complete.set_outcome(v1::CompleteResponse::ALREADY_COMPLETED);
  EXPECT_EQ(ExitCodeOf(complete), 0);
  complete.set_outcome(v1::CompleteResponse::STALE_TOKEN);
  EXPECT_EQ(ExitCodeOf(complete), 14);
  complete.set_outcome(v1::CompleteResponse::NOT_FOUND);
  EXPECT_EQ(ExitCodeOf(complete), 15);

  v1::ReleaseResponse release;
  release.set_outcome(v1::ReleaseResponse::OK);
  EXPECT_EQ(ExitCodeOf(release), 0);
  release.set_outcome(v1::ReleaseResponse::FAILED);
  EXPECT_EQ(ExitCodeOf(release), 12);
  release.set_outcome(v1::ReleaseResponse::STALE_TOKEN);
  EXPECT_EQ(ExitCodeOf(release), 14);
  release.set_outcome(v1::ReleaseResponse::NOT_FOUND);
  EXPECT_EQ(ExitCodeOf(release), 15);

  v1::ExtendResponse extend;
  extend.set_outcome(v1::ExtendResponse::OK);
  EXPECT_EQ(ExitCodeOf(extend), 0);
  extend.set_outcome(v1::ExtendResponse::STALE_TOKEN);
  EXPECT_EQ(ExitCodeOf(extend), 14);
  extend.set_outcome(v1::ExtendResponse::NOT_FOUND);
  EXPECT_EQ(ExitCodeOf(extend), 15);

  v1::QueryResponse query;
  query.mutable_record()->set_state(v1::STATE_COMPLETED);
  EXPECT_EQ(ExitCodeOf(query), 0);
  query.mutable_record()->set_state(v1::STATE_ABSENT);
  EXPECT_EQ(ExitCodeOf(query), 15);
}

TEST(ExitCodesTest, OutcomeUnknownToThisBuildIsAFailureNeverSuccess) {
  v1::ClaimResponse claim;
  claim.set_outcome(static_cast<v1::ClaimResponse::Outcome>(99));
  EXPECT_EQ(ExitCodeOf(claim), kExitError);
  v1::CompleteResponse complete;  // OUTCOME_UNSPECIFIED.
  EXPECT_EQ(ExitCodeOf(complete), kExitError);
  v1::ExtendResponse extend;
  extend.set_outcome(static_cast<v1::ExtendResponse::Outcome>(7));
  EXPECT_EQ(ExitCodeOf(extend), kExitError);
  v1::QueryResponse query;  // STATE_UNSPECIFIED.
  EXPECT_EQ(ExitCodeOf(query), kExitError);
}

TEST(ExitCodesTest, NoKnownOutcomeSharesTheExitCodeOfAFailedCall) {
  for (const OutcomeExit& row : OutcomeTable()) EXPECT_NE(row.exit, kExitError) << row.name;
}

}  // namespace
}  // namespace dedup::ctl
