#include "exit_codes.h"

namespace dedup::ctl {
namespace {

using v1::ClaimResponse;
using v1::CompleteResponse;
using v1::ExtendResponse;
using v1::ReleaseResponse;

constexpr OutcomeExit kTable[] = {
    {Answer::kClaimOutcome, ClaimResponse::ACQUIRED, "ACQUIRED", kExitOk},
    {Answer::kClaimOutcome, ClaimResponse::IN_PROGRESS, "IN_PROGRESS", kExitInProgress},
    {Answer::kClaimOutcome, ClaimResponse::COMPLETED, "COMPLETED", kExitCompleted},
    {Answer::kClaimOutcome, ClaimResponse::FAILED, "FAILED", kExitFailed},
    {Answer::kClaimOutcome, ClaimResponse::MISMATCH, "MISMATCH", kExitMismatch},

    {Answer::kCompleteOutcome, CompleteResponse::OK, "OK", kExitOk},
    {Answer::kCompleteOutcome, CompleteResponse::ALREADY_COMPLETED, "ALREADY_COMPLETED", kExitOk},
    {Answer::kCompleteOutcome, CompleteResponse::STALE_TOKEN, "STALE_TOKEN", kExitStaleToken},
    {Answer::kCompleteOutcome, CompleteResponse::NOT_FOUND, "NOT_FOUND", kExitNotFound},

    {Answer::kReleaseOutcome, ReleaseResponse::OK, "OK", kExitOk},
    {Answer::kReleaseOutcome, ReleaseResponse::FAILED, "FAILED", kExitFailed},
    {Answer::kReleaseOutcome, ReleaseResponse::STALE_TOKEN, "STALE_TOKEN", kExitStaleToken},
    {Answer::kReleaseOutcome, ReleaseResponse::NOT_FOUND, "NOT_FOUND", kExitNotFound},

    {Answer::kExtendOutcome, ExtendResponse::OK, "OK", kExitOk},
    {Answer::kExtendOutcome, ExtendResponse::STALE_TOKEN, "STALE_TOKEN", kExitStaleToken},
    {Answer::kExtendOutcome, ExtendResponse::NOT_FOUND, "NOT_FOUND", kExitNotFound},

    {Answer::kRecordState, v1::STATE_IN_PROGRESS, "STATE_IN_PROGRESS", kExitOk},
    {Answer::kRecordState, v1::STATE_COMPLETED, "STATE_COMPLETED", kExitOk},
    {Answer::kRecordState, v1::STATE_RELEASED, "STATE_RELEASED", kExitOk},
    {Answer::kRecordState, v1::STATE_FAILED, "STATE_FAILED", kExitOk},
    {Answer::kRecordState, v1::STATE_ABSENT, "STATE_ABSENT", kExitNotFound},
};

ExitCode ExitCodeOf(Answer answer, int value) {
  const OutcomeExit* row = FindOutcome(answer, value);
  return row != nullptr ? row->exit : kExitError;
}

}  // namespace

absl::Span<const OutcomeExit> OutcomeTable() { return kTable; }

const OutcomeExit* FindOutcome(Answer answer, int value) {
  for (const OutcomeExit& row : kTable) {
    if (row.answer == answer && row.value == value) return &row;
  }
  return nullptr;
}

ExitCode ExitCodeOf(const v1::ClaimResponse& response) {
  return ExitCodeOf(Answer::kClaimOutcome, response.outcome());
}

ExitCode ExitCodeOf(const v1::CompleteResponse& response) {
  return ExitCodeOf(Answer::kCompleteOutcome, response.outcome());
}

ExitCode ExitCodeOf(const v1::ReleaseResponse& response) {
  return ExitCodeOf(Answer::kReleaseOutcome, response.outcome());
}

ExitCode ExitCodeOf(const v1::ExtendResponse& response) {
  return ExitCodeOf(Answer::kExtendOutcome, response.outcome());
}

ExitCode ExitCodeOf(const v1::QueryResponse& response) {
  return ExitCodeOf(Answer::kRecordState, response.record().state());
}

}  // namespace dedup::ctl
