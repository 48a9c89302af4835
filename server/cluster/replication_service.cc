#include "server/cluster/replication_service.h"

#include "server/status_convert.h"

namespace dedup::server::cluster {

grpc::Status ReplicationService::Allowed(const grpc::ServerContextBase& context) {
  absl::StatusOr<Caller> caller = auth_->Authenticate(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(auth_->Authorize(*caller, "*", Role::kReplica));
}

grpc::Status ReplicationService::Append(grpc::ServerContext* context,
                                        const replication::v1::AppendRequest* request,
                                        replication::v1::AppendResponse* response) {
  grpc::Status allowed = Allowed(*context);
  if (!allowed.ok()) return allowed;
  *response = replicator_->HandleAppend(*request);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* ReplicationService::Ship(grpc::CallbackServerContext* context,
                                                   const replication::v1::ShipRequest* request,
                                                   replication::v1::ShipResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status allowed = Allowed(*context);
  if (!allowed.ok()) {
    reactor->Finish(allowed);
    return reactor;
  }
  auto handle = [this, reactor, request, response] {
    absl::StatusOr<replication::v1::ShipResponse> shipped = replicator_->HandleShip(*request);
    if (!shipped.ok()) {
      reactor->Finish(ToGrpcStatus(shipped.status()));
      return;
    }
    *response = std::move(*shipped);
    reactor->Finish(grpc::Status::OK);
  };
  if (!store_->WritesStalled()) {
    // On this thread; in fsync the answer comes from the thread whose
    // sync covers the appends.
    replicator_->HandleShipAsync(
        *request, [reactor, response](absl::StatusOr<replication::v1::ShipResponse> shipped) {
          if (!shipped.ok()) {
            reactor->Finish(ToGrpcStatus(shipped.status()));
            return;
          }
          *response = std::move(*shipped);
          reactor->Finish(grpc::Status::OK);
        });
    return reactor;
  }
  switch (pool_->Submit(handle)) {
    case WorkerPool::Admission::kQueued:
      break;
    case WorkerPool::Admission::kFull:
      // The leader sends again after a pause.
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "too many replication calls waiting for storage"));
      break;
    case WorkerPool::Admission::kShuttingDown:
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
      break;
  }
  return reactor;
}

grpc::Status ReplicationService::Promise(grpc::ServerContext* context,
                                         const replication::v1::PromiseRequest* request,
                                         replication::v1::PromiseResponse* response) {
  grpc::Status allowed = Allowed(*context);
  if (!allowed.ok()) return allowed;
  *response = replicator_->HandlePromise(*request);
  return grpc::Status::OK;
}

grpc::Status ReplicationService::ReadLog(grpc::ServerContext* context,
                                         const replication::v1::ReadLogRequest* request,
                                         replication::v1::ReadLogResponse* response) {
  grpc::Status allowed = Allowed(*context);
  if (!allowed.ok()) return allowed;
  absl::StatusOr<replication::v1::ReadLogResponse> read = replicator_->HandleReadLog(*request);
  if (!read.ok()) return ToGrpcStatus(read.status());
  *response = std::move(*read);
  return grpc::Status::OK;
}

grpc::Status ReplicationService::Restore(grpc::ServerContext* context,
                                         const replication::v1::RestoreRequest* request,
                                         replication::v1::RestoreResponse* response) {
  grpc::Status allowed = Allowed(*context);
  if (!allowed.ok()) return allowed;
  *response = replicator_->HandleRestore(*request);
  return grpc::Status::OK;
}

}  // namespace dedup::server::cluster
