#include "server/proto_mapping.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace dedup::server {
namespace {

using storage::Outcome;
using storage::State;

struct StateRow {
  State state;
  v1::RecordState proto;
};
constexpr std::array<StateRow, 5> kStates = {{
    {State::kAbsent, v1::STATE_ABSENT},
    {State::kInProgress, v1::STATE_IN_PROGRESS},
    {State::kCompleted, v1::STATE_COMPLETED},
    {State::kReleased, v1::STATE_RELEASED},
    {State::kFailed, v1::STATE_FAILED},
}};

constexpr OutcomeRow kClaimOutcomes[] = {
    {Outcome::kAcquired, v1::ClaimResponse::ACQUIRED, "acquired"},
    {Outcome::kInProgress, v1::ClaimResponse::IN_PROGRESS, "in_progress"},
    {Outcome::kCompleted, v1::ClaimResponse::COMPLETED, "completed"},
    {Outcome::kFailed, v1::ClaimResponse::FAILED, "failed"},
    {Outcome::kMismatch, v1::ClaimResponse::MISMATCH, "mismatch"},
};
constexpr OutcomeRow kCompleteOutcomes[] = {
    {Outcome::kOk, v1::CompleteResponse::OK, "ok"},
    {Outcome::kAlreadyCompleted, v1::CompleteResponse::ALREADY_COMPLETED, "already_completed"},
    {Outcome::kStaleToken, v1::CompleteResponse::STALE_TOKEN, "stale_token"},
    {Outcome::kNotFound, v1::CompleteResponse::NOT_FOUND, "not_found"},
};
constexpr OutcomeRow kReleaseOutcomes[] = {
    {Outcome::kOk, v1::ReleaseResponse::OK, "ok"},
    {Outcome::kFailed, v1::ReleaseResponse::FAILED, "failed"},
    {Outcome::kStaleToken, v1::ReleaseResponse::STALE_TOKEN, "stale_token"},
    {Outcome::kNotFound, v1::ReleaseResponse::NOT_FOUND, "not_found"},
};
constexpr OutcomeRow kExtendOutcomes[] = {
    {Outcome::kOk, v1::ExtendResponse::OK, "ok"},
    {Outcome::kStaleToken, v1::ExtendResponse::STALE_TOKEN, "stale_token"},
    {Outcome::kNotFound, v1::ExtendResponse::NOT_FOUND, "not_found"},
};

}  // namespace

v1::RecordState StateToProto(State state) {
  for (const StateRow& row : kStates) {
    if (row.state == state) return row.proto;
  }
  return v1::STATE_UNSPECIFIED;
}

absl::StatusOr<State> StateFilterFromProto(v1::RecordState state) {
  if (state == v1::STATE_UNSPECIFIED) return State::kAbsent;  // Every live state.
  for (const StateRow& row : kStates) {
    if (row.proto == state && row.state != State::kAbsent) return row.state;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("state: must be a stored state (IN_PROGRESS, COMPLETED, RELEASED, FAILED) "
                   "or unset, got ",
                   v1::RecordState_Name(state)));
}

absl::Span<const OutcomeRow> OutcomesOf(OutcomeKind kind) {
  switch (kind) {
    case OutcomeKind::kClaim:
      return kClaimOutcomes;
    case OutcomeKind::kComplete:
      return kCompleteOutcomes;
    case OutcomeKind::kRelease:
      return kReleaseOutcomes;
    case OutcomeKind::kExtend:
      return kExtendOutcomes;
  }
  return {};
}

size_t OutcomeIndex(OutcomeKind kind, Outcome outcome) {
  const absl::Span<const OutcomeRow> rows = OutcomesOf(kind);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].outcome == outcome) return i;
  }
  return rows.size() - 1;
}

const OutcomeRow& OutcomeRowOf(OutcomeKind kind, Outcome outcome) {
  return OutcomesOf(kind)[OutcomeIndex(kind, outcome)];
}

}  // namespace dedup::server
