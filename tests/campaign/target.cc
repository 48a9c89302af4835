#include "tests/campaign/target.h"

#include <chrono>
#include <utility>

#include "absl/types/span.h"
#include "grpcpp/client_context.h"

namespace dedup::campaign {
namespace {

using storage::Outcome;

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

v1::Operation ToProto(const storage::Operation& op) {
  v1::Operation out;
  if (const auto* claim = std::get_if<storage::ClaimOp>(&op)) {
    v1::ClaimRequest* r = out.mutable_claim();
    r->set_namespace_(claim->ns);
    r->set_key(claim->key);
    r->set_owner(claim->owner);
    r->set_lease_ms(static_cast<uint64_t>(claim->lease_ms));
    r->set_fingerprint(claim->fingerprint);
  } else if (const auto* complete = std::get_if<storage::CompleteOp>(&op)) {
    v1::CompleteRequest* r = out.mutable_complete();
    r->set_namespace_(complete->ns);
    r->set_key(complete->key);
    r->set_token(complete->token);
    r->set_result(complete->result);
    r->set_retention_ms(static_cast<uint64_t>(complete->retention_ms));
  } else if (const auto* release = std::get_if<storage::ReleaseOp>(&op)) {
    v1::ReleaseRequest* r = out.mutable_release();
    r->set_namespace_(release->ns);
    r->set_key(release->key);
    r->set_token(release->token);
  } else if (const auto* extend = std::get_if<storage::ExtendOp>(&op)) {
    v1::ExtendRequest* r = out.mutable_extend();
    r->set_namespace_(extend->ns);
    r->set_key(extend->key);
    r->set_token(extend->token);
    r->set_lease_ms(static_cast<uint64_t>(extend->lease_ms));
  } else if (const auto* query = std::get_if<storage::QueryOp>(&op)) {
    v1::QueryRequest* r = out.mutable_query();
    r->set_namespace_(query->ns);
    r->set_key(query->key);
  }
  return out;
}

Outcome FromProto(v1::ClaimResponse::Outcome outcome) {
  switch (outcome) {
    case v1::ClaimResponse::ACQUIRED:
      return Outcome::kAcquired;
    case v1::ClaimResponse::IN_PROGRESS:
      return Outcome::kInProgress;
    case v1::ClaimResponse::COMPLETED:
      return Outcome::kCompleted;
    case v1::ClaimResponse::FAILED:
      return Outcome::kFailed;
    default:
      return Outcome::kMismatch;
  }
}

Outcome FromProto(v1::CompleteResponse::Outcome outcome) {
  switch (outcome) {
    case v1::CompleteResponse::OK:
      return Outcome::kOk;
    case v1::CompleteResponse::ALREADY_COMPLETED:
      return Outcome::kAlreadyCompleted;
    case v1::CompleteResponse::STALE_TOKEN:
      return Outcome::kStaleToken;
    default:
      return Outcome::kNotFound;
  }
}

Outcome FromProto(v1::ReleaseResponse::Outcome outcome) {
  switch (outcome) {
    case v1::ReleaseResponse::OK:
      return Outcome::kOk;
    case v1::ReleaseResponse::STALE_TOKEN:
      return Outcome::kStaleToken;
    case v1::ReleaseResponse::FAILED:
      return Outcome::kFailed;
    default:
      return Outcome::kNotFound;
  }
}

Outcome FromProto(v1::ExtendResponse::Outcome outcome) {
  switch (outcome) {
    case v1::ExtendResponse::OK:
      return Outcome::kOk;
    case v1::ExtendResponse::STALE_TOKEN:
      return Outcome::kStaleToken;
    default:
      return Outcome::kNotFound;
  }
}

storage::State FromProto(v1::RecordState state) {
  switch (state) {
    case v1::STATE_IN_PROGRESS:
      return storage::State::kInProgress;
    case v1::STATE_COMPLETED:
      return storage::State::kCompleted;
    case v1::STATE_RELEASED:
      return storage::State::kReleased;
    case v1::STATE_FAILED:
      return storage::State::kFailed;
    default:
      return storage::State::kAbsent;
  }
}

Answer FromProto(const v1::ClaimResponse& r) {
  Answer a{true, FromProto(r.outcome()), r.token(), r.result(), storage::State::kAbsent};
  return a;
}

Answer FromProto(const v1::Record& record) {
  Answer a;
  a.answered = true;
  a.state = FromProto(record.state());
  a.outcome = a.state == storage::State::kAbsent ? Outcome::kAbsent : Outcome::kFound;
  a.token = record.token();
  a.result = record.result();
  return a;
}

Answer FromProto(const v1::OperationResult& result) {
  Answer a;
  switch (result.result_case()) {
    case v1::OperationResult::kClaim:
      return FromProto(result.claim());
    case v1::OperationResult::kComplete:
      a.answered = true;
      a.outcome = FromProto(result.complete().outcome());
      return a;
    case v1::OperationResult::kRelease:
      a.answered = true;
      a.outcome = FromProto(result.release().outcome());
      return a;
    case v1::OperationResult::kExtend:
      a.answered = true;
      a.outcome = FromProto(result.extend().outcome());
      return a;
    case v1::OperationResult::kQuery:
      return FromProto(result.query().record());
    default:
      return a;  // An error item: unanswered.
  }
}

Answer FromStore(const absl::StatusOr<storage::OpResult>& r) {
  Answer a;
  if (!r.ok()) return a;
  a.answered = true;
  a.outcome = r->outcome;
  a.state = r->record.state;
  a.token = r->record.token;
  a.result = r->record.result;
  return a;
}

}  // namespace

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kUnary:
      return "unary";
    case Mode::kBatch:
      return "batch";
    case Mode::kStream:
      return "stream";
  }
  return "?";
}

GrpcTarget::GrpcTarget(std::shared_ptr<grpc::Channel> channel)
    : stub_(v1::Dedup::NewStub(std::move(channel))) {}

std::vector<Answer> GrpcTarget::Apply(const std::vector<storage::Operation>& ops, Mode mode) {
  if (mode == Mode::kUnary) {
    std::vector<Answer> answers;
    for (const storage::Operation& op : ops) answers.push_back(Unary(op));
    return answers;
  }
  v1::BatchRequest request;
  for (const storage::Operation& op : ops) *request.add_operations() = ToProto(op);
  std::vector<Answer> answers = mode == Mode::kBatch ? Batch(request) : Stream(request);
  answers.resize(ops.size());
  return answers;
}

Answer GrpcTarget::Unary(const storage::Operation& op) {
  const v1::Operation proto = ToProto(op);
  grpc::ClientContext context;
  SetDeadline(&context);
  Answer a;
  switch (proto.op_case()) {
    case v1::Operation::kClaim: {
      v1::ClaimResponse r;
      if (stub_->Claim(&context, proto.claim(), &r).ok()) a = FromProto(r);
      break;
    }
    case v1::Operation::kComplete: {
      v1::CompleteResponse r;
      if (stub_->Complete(&context, proto.complete(), &r).ok()) {
        a.answered = true;
        a.outcome = FromProto(r.outcome());
      }
      break;
    }
    case v1::Operation::kRelease: {
      v1::ReleaseResponse r;
      if (stub_->Release(&context, proto.release(), &r).ok()) {
        a.answered = true;
        a.outcome = FromProto(r.outcome());
      }
      break;
    }
    case v1::Operation::kExtend: {
      v1::ExtendResponse r;
      if (stub_->Extend(&context, proto.extend(), &r).ok()) {
        a.answered = true;
        a.outcome = FromProto(r.outcome());
      }
      break;
    }
    case v1::Operation::kQuery: {
      v1::QueryResponse r;
      if (stub_->Query(&context, proto.query(), &r).ok()) a = FromProto(r.record());
      break;
    }
    default:
      break;
  }
  return a;
}

std::vector<Answer> GrpcTarget::Batch(const v1::BatchRequest& request) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::BatchResponse response;
  std::vector<Answer> answers;
  if (!stub_->Batch(&context, request, &response).ok()) return answers;
  for (const v1::OperationResult& result : response.results()) {
    answers.push_back(FromProto(result));
  }
  return answers;
}

std::vector<Answer> GrpcTarget::Stream(const v1::BatchRequest& request) {
  grpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>> stream =
      stub_->Stream(&context);
  if (!stream->Write(request)) {
    stream->Finish().IgnoreError();
    return {};
  }
  stream->WritesDone();
  v1::BatchResponse response;
  std::vector<Answer> read;
  while (read.size() < static_cast<size_t>(request.operations_size()) && stream->Read(&response)) {
    for (const v1::OperationResult& result : response.results()) read.push_back(FromProto(result));
  }
  // Every answer read was persisted before it was sent, even if the
  // stream then ends in an error (the server died).
  stream->Finish().IgnoreError();
  return read;
}

std::vector<Answer> StoreTarget::Apply(const std::vector<storage::Operation>& ops, Mode mode) {
  std::vector<Answer> answers;
  if (mode == Mode::kUnary) {
    for (const storage::Operation& op : ops) answers.push_back(FromStore(store_->Apply(op)));
    return answers;
  }
  for (const absl::StatusOr<storage::OpResult>& r : store_->Apply(absl::MakeConstSpan(ops))) {
    answers.push_back(FromStore(r));
  }
  return answers;
}

}  // namespace dedup::campaign
