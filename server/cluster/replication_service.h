#ifndef DEDUP_SERVER_CLUSTER_REPLICATION_SERVICE_H_
#define DEDUP_SERVER_CLUSTER_REPLICATION_SERVICE_H_

// dedup.replication.v1.Replication on the node's gRPC port: what the other
// replicas of its shards call (replicator.h). With grants configured, only
// identities holding the "replica" role may call it, so that no client can
// forge log entries or votes.

#include "dedup/replication/v1/replication.grpc.pb.h"
#include "server/authorization.h"
#include "server/cluster/replicator.h"

namespace dedup::server::cluster {

class ReplicationService final : public replication::v1::Replication::Service {
 public:
  // Both must outlive the service.
  ReplicationService(Replicator* replicator, Authorizer* auth)
      : replicator_(replicator), auth_(auth) {}

  grpc::Status Append(grpc::ServerContext* context, const replication::v1::AppendRequest* request,
                      replication::v1::AppendResponse* response) override;
  grpc::Status Ship(grpc::ServerContext* context, const replication::v1::ShipRequest* request,
                    replication::v1::ShipResponse* response) override;
  grpc::Status Promise(grpc::ServerContext* context, const replication::v1::PromiseRequest* request,
                       replication::v1::PromiseResponse* response) override;
  grpc::Status ReadLog(grpc::ServerContext* context, const replication::v1::ReadLogRequest* request,
                       replication::v1::ReadLogResponse* response) override;
  grpc::Status Restore(grpc::ServerContext* context, const replication::v1::RestoreRequest* request,
                       replication::v1::RestoreResponse* response) override;

 private:
  grpc::Status Allowed(const grpc::ServerContext& context);

  Replicator* const replicator_;
  Authorizer* const auth_;
};

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_REPLICATION_SERVICE_H_
