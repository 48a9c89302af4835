#include "server/response_builder.h"

#include <algorithm>
#include <string>

#include "server/proto_mapping.h"
#include "server/status_convert.h"

namespace dedup::server {
namespace {

using storage::Outcome;

template <typename Enum>
Enum ProtoOutcome(OutcomeKind kind, Outcome outcome) {
  return static_cast<Enum>(OutcomeRowOf(kind, outcome).proto);
}

}  // namespace

bool TokenIsShown(storage::State visible_state) {
  switch (visible_state) {
    case storage::State::kCompleted:
    case storage::State::kReleased:
    case storage::State::kFailed:
      return true;
    case storage::State::kInProgress:
    case storage::State::kAbsent:
      return false;
  }
  return false;
}

void FillRecord(const storage::Record& r, v1::Record* out) {
  out->set_namespace_(r.ns);
  out->set_key(r.key);
  out->set_state(StateToProto(r.state));
  out->set_owner(r.owner);
  if (TokenIsShown(r.state)) out->set_token(r.token);
  out->set_fingerprint(r.fingerprint);
  out->set_lease_expires_ms(r.state == storage::State::kInProgress ? r.lease_expires_ms : 0);
  out->set_retention_expires_ms(r.retention_expires_ms);
  out->set_attempts(r.attempts);
  out->set_created_ms(r.created_ms);
  out->set_updated_ms(r.updated_ms);
  out->set_completed_ms(r.completed_ms);
  out->set_result(r.result);
}

void FillClaim(const storage::OpResult& result, v1::ClaimResponse* out) {
  const storage::Record& r = result.record;
  out->set_outcome(ProtoOutcome<v1::ClaimResponse::Outcome>(OutcomeKind::kClaim, result.outcome));
  // The holder's token goes only to the holder: ACQUIRED is the claim
  // itself, a re-entrant Claim included (design.md §10).
  if (result.outcome == Outcome::kAcquired || TokenIsShown(r.state)) out->set_token(r.token);
  out->set_attempts(r.attempts);
  switch (result.outcome) {
    case Outcome::kAcquired:
      out->set_lease_expires_ms(r.lease_expires_ms);
      out->set_takeover(result.takeover);
      break;
    case Outcome::kInProgress:
      out->set_lease_expires_ms(r.lease_expires_ms);
      out->set_holder(r.owner);
      break;
    case Outcome::kCompleted:
      out->set_result(r.result);
      out->set_completed_ms(r.completed_ms);
      out->set_retention_remaining_ms(
          static_cast<uint64_t>(std::max<int64_t>(r.retention_expires_ms - result.now_ms, 0)));
      break;
    default:
      break;
  }
}

void FillComplete(const storage::OpResult& result, v1::CompleteResponse* out) {
  out->set_outcome(
      ProtoOutcome<v1::CompleteResponse::Outcome>(OutcomeKind::kComplete, result.outcome));
  if (result.outcome == Outcome::kOk || result.outcome == Outcome::kAlreadyCompleted) {
    out->set_retention_expires_ms(result.record.retention_expires_ms);
  }
}

void FillRelease(const storage::OpResult& result, v1::ReleaseResponse* out) {
  out->set_outcome(
      ProtoOutcome<v1::ReleaseResponse::Outcome>(OutcomeKind::kRelease, result.outcome));
  out->set_attempts(result.record.attempts);
}

void FillExtend(const storage::OpResult& result, v1::ExtendResponse* out) {
  out->set_outcome(ProtoOutcome<v1::ExtendResponse::Outcome>(OutcomeKind::kExtend, result.outcome));
  if (result.outcome == Outcome::kOk) {
    out->set_lease_expires_ms(result.record.lease_expires_ms);
  }
}

void FillQuery(const storage::OpResult& result, v1::QueryResponse* out) {
  FillRecord(result.record, out->mutable_record());
}

void FillOperationResult(const v1::Operation& operation,
                         const absl::StatusOr<storage::OpResult>& result,
                         v1::OperationResult* out) {
  if (!result.ok()) {
    const grpc::Status status = ToGrpcStatus(result.status());
    out->mutable_error()->set_code(static_cast<int32_t>(status.error_code()));
    out->mutable_error()->set_message(status.error_message());
    return;
  }
  switch (operation.op_case()) {
    case v1::Operation::kClaim:
      FillClaim(*result, out->mutable_claim());
      break;
    case v1::Operation::kComplete:
      FillComplete(*result, out->mutable_complete());
      break;
    case v1::Operation::kRelease:
      FillRelease(*result, out->mutable_release());
      break;
    case v1::Operation::kExtend:
      FillExtend(*result, out->mutable_extend());
      break;
    case v1::Operation::kQuery:
      FillQuery(*result, out->mutable_query());
      break;
    case v1::Operation::OP_NOT_SET:
      break;
  }
}

}  // namespace dedup::server
