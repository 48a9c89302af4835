#include "tests/client/scripted_dedup.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dedup::client::test {

ScriptedDedup::ScriptedDedup(int unavailable_claims, v1::TopologyResponse topology)
    : unavailable_claims_(unavailable_claims), topology_(std::move(topology)) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  if (server_ != nullptr && port != 0) address_ = absl::StrCat("127.0.0.1:", port);
}

ScriptedDedup::~ScriptedDedup() {
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
}

grpc::Status ScriptedDedup::NextClaim(v1::ClaimResponse* response) {
  if (claims_.fetch_add(1) < unavailable_claims_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "scripted: not yet");
  }
  response->set_outcome(v1::ClaimResponse::ACQUIRED);
  response->set_token(kToken);
  return grpc::Status::OK;
}

grpc::Status ScriptedDedup::Claim(grpc::ServerContext* /*context*/,
                                  const v1::ClaimRequest* /*request*/,
                                  v1::ClaimResponse* response) {
  return NextClaim(response);
}

grpc::Status ScriptedDedup::Stream(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<v1::BatchResponse, v1::BatchRequest>* stream) {
  return AnswerClaimStream(
      stream, [this](const v1::ClaimRequest& /*request*/, v1::ClaimResponse* response) {
        return NextClaim(response);
      });
}

grpc::Status AnswerClaimStream(
    grpc::ServerReaderWriter<v1::BatchResponse, v1::BatchRequest>* stream,
    const std::function<grpc::Status(const v1::ClaimRequest&, v1::ClaimResponse*)>& claim) {
  v1::BatchRequest batch;
  while (stream->Read(&batch)) {
    v1::BatchResponse answer;
    answer.set_batch_id(batch.batch_id());
    for (const v1::Operation& op : batch.operations()) {
      v1::OperationResult* result = answer.add_results();
      if (!op.has_claim()) {
        result->mutable_error()->set_code(grpc::StatusCode::UNIMPLEMENTED);
        continue;
      }
      grpc::Status status = claim(op.claim(), result->mutable_claim());
      if (!status.ok()) {
        result->clear_claim();
        result->mutable_error()->set_code(status.error_code());
        result->mutable_error()->set_message(status.error_message());
      }
    }
    if (!stream->Write(answer)) break;
  }
  return grpc::Status::OK;
}

grpc::Status ScriptedDedup::Topology(grpc::ServerContext* /*context*/,
                                     const v1::TopologyRequest* /*request*/,
                                     v1::TopologyResponse* response) {
  *response = topology_;
  return grpc::Status::OK;
}

}  // namespace dedup::client::test
