#include "server/dedup_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/response_builder.h"
#include "server/scan_reactor.h"
#include "server/status_convert.h"
#include "server/stream_reactor.h"

namespace dedup::server {
namespace {

const grpc::Status kShuttingDown(grpc::StatusCode::UNAVAILABLE, "server is shutting down");

}  // namespace

absl::Status CheckBatchSize(const v1::BatchRequest& request) {
  if (request.operations_size() > kMaxBatchOperations) {
    return absl::InvalidArgumentError(
        absl::StrCat("operations: at most ", kMaxBatchOperations, " per batch, got ",
                     request.operations_size()));
  }
  return absl::OkStatus();
}

DedupService::DedupService(storage::Store* store, WorkerPool* pool,
                           RequestTranslator translator)
    : store_(store), pool_(pool), translator_(std::move(translator)) {}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* DedupService::Unary(
    grpc::CallbackServerContext* context, const Request* request, Response* response,
    void (*fill)(const storage::OpResult&, Response*)) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<storage::Operation> op = translator_.Translate(*request);
  if (!op.ok()) {
    reactor->Finish(ToGrpcStatus(op.status()));
    return reactor;
  }
  const bool queued = pool_->Submit([this, reactor, response, fill, op = std::move(*op)] {
    absl::StatusOr<storage::OpResult> result = store_->Apply(op);
    if (result.ok()) fill(*result, response);
    reactor->Finish(ToGrpcStatus(result.status()));
  });
  if (!queued) reactor->Finish(kShuttingDown);
  return reactor;
}

grpc::ServerUnaryReactor* DedupService::Claim(grpc::CallbackServerContext* context,
                                              const v1::ClaimRequest* request,
                                              v1::ClaimResponse* response) {
  return Unary(context, request, response, &FillClaim);
}

grpc::ServerUnaryReactor* DedupService::Complete(grpc::CallbackServerContext* context,
                                                 const v1::CompleteRequest* request,
                                                 v1::CompleteResponse* response) {
  return Unary(context, request, response, &FillComplete);
}

grpc::ServerUnaryReactor* DedupService::Release(grpc::CallbackServerContext* context,
                                                const v1::ReleaseRequest* request,
                                                v1::ReleaseResponse* response) {
  return Unary(context, request, response, &FillRelease);
}

grpc::ServerUnaryReactor* DedupService::Extend(grpc::CallbackServerContext* context,
                                               const v1::ExtendRequest* request,
                                               v1::ExtendResponse* response) {
  return Unary(context, request, response, &FillExtend);
}

grpc::ServerUnaryReactor* DedupService::Query(grpc::CallbackServerContext* context,
                                              const v1::QueryRequest* request,
                                              v1::QueryResponse* response) {
  return Unary(context, request, response, &FillQuery);
}

grpc::ServerUnaryReactor* DedupService::Batch(grpc::CallbackServerContext* context,
                                              const v1::BatchRequest* request,
                                              v1::BatchResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status size = CheckBatchSize(*request);
  if (!size.ok()) {
    reactor->Finish(ToGrpcStatus(size));
    return reactor;
  }
  const bool queued = pool_->Submit([this, reactor, request, response] {
    ExecuteBatch(*request, response);
    reactor->Finish(grpc::Status::OK);
  });
  if (!queued) reactor->Finish(kShuttingDown);
  return reactor;
}

void DedupService::ExecuteBatch(const v1::BatchRequest& request,
                                v1::BatchResponse* response) {
  const int n = request.operations_size();
  response->set_batch_id(request.batch_id());
  std::vector<absl::StatusOr<storage::OpResult>> results(
      n, absl::InternalError("not executed"));
  std::vector<storage::Operation> valid;
  std::vector<int> positions;
  valid.reserve(n);
  positions.reserve(n);
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<storage::Operation> op = translator_.Translate(request.operations(i));
    if (op.ok()) {
      valid.push_back(std::move(*op));
      positions.push_back(i);
    } else {
      results[i] = op.status();
    }
  }
  if (!valid.empty()) {
    std::vector<absl::StatusOr<storage::OpResult>> applied = store_->Apply(valid);
    for (size_t j = 0; j < applied.size(); ++j) {
      results[positions[j]] = std::move(applied[j]);
    }
  }
  for (int i = 0; i < n; ++i) {
    FillOperationResult(request.operations(i), results[i], response->add_results());
  }
}

grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* DedupService::Stream(
    grpc::CallbackServerContext* /*context*/) {
  return new StreamReactor(this);
}

grpc::ServerWriteReactor<v1::Record>* DedupService::Scan(
    grpc::CallbackServerContext* /*context*/, const v1::ScanRequest* request) {
  return new ScanReactor(this, *request);
}

}  // namespace dedup::server
