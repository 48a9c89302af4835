#include "server/cluster/replication_service.h"

#include "server/status_convert.h"

namespace dedup::server::cluster {

grpc::Status ReplicationService::Allowed(const grpc::ServerContext& context) {
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

grpc::Status ReplicationService::Ship(grpc::ServerContext* context,
                                      const replication::v1::ShipRequest* request,
                                      replication::v1::ShipResponse* response) {
  grpc::Status allowed = Allowed(*context);
  if (!allowed.ok()) return allowed;
  absl::StatusOr<replication::v1::ShipResponse> shipped = replicator_->HandleShip(*request);
  if (!shipped.ok()) return ToGrpcStatus(shipped.status());
  *response = std::move(*shipped);
  return grpc::Status::OK;
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
