#include "server/response_builder.h"

namespace dedup::server {
namespace {

using storage::Outcome;

v1::RecordState ToProto(storage::State state) {
  switch (state) {
    case storage::State::kAbsent:
      return v1::STATE_ABSENT;
    case storage::State::kInProgress:
      return v1::STATE_IN_PROGRESS;
    case storage::State::kCompleted:
      return v1::STATE_COMPLETED;
    case storage::State::kReleased:
      return v1::STATE_RELEASED;
    case storage::State::kFailed:
      return v1::STATE_FAILED;
  }
  return v1::STATE_UNSPECIFIED;
}

v1::ClaimResponse::Outcome ClaimOutcome(Outcome outcome) {
  switch (outcome) {
    case Outcome::kAcquired:
      return v1::ClaimResponse::ACQUIRED;
    case Outcome::kInProgress:
      return v1::ClaimResponse::IN_PROGRESS;
    case Outcome::kCompleted:
      return v1::ClaimResponse::COMPLETED;
    case Outcome::kFailed:
      return v1::ClaimResponse::FAILED;
    case Outcome::kMismatch:
      return v1::ClaimResponse::MISMATCH;
    default:
      return v1::ClaimResponse::OUTCOME_UNSPECIFIED;
  }
}

}  // namespace

void FillRecord(const storage::Record& r, v1::Record* out) {
  out->set_namespace_(r.ns);
  out->set_key(r.key);
  out->set_state(ToProto(r.state));
  out->set_owner(r.owner);
  out->set_token(r.token);
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
  out->set_outcome(ClaimOutcome(result.outcome));
  out->set_token(r.token);
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
      break;
    default:
      break;
  }
}

void FillComplete(const storage::OpResult& result, v1::CompleteResponse* out) {
  switch (result.outcome) {
    case Outcome::kOk:
      out->set_outcome(v1::CompleteResponse::OK);
      break;
    case Outcome::kAlreadyCompleted:
      out->set_outcome(v1::CompleteResponse::ALREADY_COMPLETED);
      break;
    case Outcome::kStaleToken:
      out->set_outcome(v1::CompleteResponse::STALE_TOKEN);
      return;
    default:
      out->set_outcome(v1::CompleteResponse::NOT_FOUND);
      return;
  }
  out->set_retention_expires_ms(result.record.retention_expires_ms);
}

void FillRelease(const storage::OpResult& result, v1::ReleaseResponse* out) {
  switch (result.outcome) {
    case Outcome::kOk:
      out->set_outcome(v1::ReleaseResponse::OK);
      break;
    case Outcome::kFailed:
      out->set_outcome(v1::ReleaseResponse::FAILED);
      break;
    case Outcome::kStaleToken:
      out->set_outcome(v1::ReleaseResponse::STALE_TOKEN);
      break;
    default:
      out->set_outcome(v1::ReleaseResponse::NOT_FOUND);
      break;
  }
  out->set_attempts(result.record.attempts);
}

void FillExtend(const storage::OpResult& result, v1::ExtendResponse* out) {
  switch (result.outcome) {
    case Outcome::kOk:
      out->set_outcome(v1::ExtendResponse::OK);
      out->set_lease_expires_ms(result.record.lease_expires_ms);
      break;
    case Outcome::kStaleToken:
      out->set_outcome(v1::ExtendResponse::STALE_TOKEN);
      break;
    default:
      out->set_outcome(v1::ExtendResponse::NOT_FOUND);
      break;
  }
}

void FillQuery(const storage::OpResult& result, v1::QueryResponse* out) {
  FillRecord(result.record, out->mutable_record());
}

void FillOperationResult(const v1::Operation& operation,
                         const absl::StatusOr<storage::OpResult>& result,
                         v1::OperationResult* out) {
  if (!result.ok()) {
    out->mutable_error()->set_code(static_cast<int32_t>(result.status().code()));
    out->mutable_error()->set_message(std::string(result.status().message()));
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
