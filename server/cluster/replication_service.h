#ifndef DEDUP_SERVER_CLUSTER_REPLICATION_SERVICE_H_
#define DEDUP_SERVER_CLUSTER_REPLICATION_SERVICE_H_

// dedup.replication.v1.Replication on the node's gRPC port: what the other
// replicas of its shards call (replicator.h). With grants configured, only
// identities holding the "replica" role may call it, so that no client can
// forge log entries or votes.

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "dedup/replication/v1/replication.grpc.pb.h"
#include "server/authorization.h"
#include "server/cluster/replicator.h"
#include "server/worker_pool.h"
#include "storage/store.h"

namespace dedup::server::cluster {

// Ship, the call that carries every write, runs on gRPC's callback threads.
// While the store's writes are not stalled, its appends are written on the
// thread that read it, without a hand-off to another thread; in fsync
// durability the replicator's log-sync thread answers it once a sync
// covers them (Replicator::HandleShipAsync). During a stall it runs on
// `pool`, so that gRPC's threads never wait for a disk. The other calls
// are rare and run on gRPC's synchronous server.
//
// ShipStream carries the same rounds on one stream per leader, without a
// call set up per round: each message is handled as a Ship call is, and
// answered before the next is read.
class ReplicationService final : public replication::v1::Replication::WithCallbackMethod_ShipStream<
                                     replication::v1::Replication::WithCallbackMethod_Ship<
                                         replication::v1::Replication::Service>> {
 public:
  // All must outlive the service.
  ReplicationService(Replicator* replicator, Authorizer* auth, const storage::Store* store,
                     WorkerPool* pool)
      : replicator_(replicator), auth_(auth), store_(store), pool_(pool) {}

  grpc::Status Append(grpc::ServerContext* context, const replication::v1::AppendRequest* request,
                      replication::v1::AppendResponse* response) override;
  grpc::ServerUnaryReactor* Ship(grpc::CallbackServerContext* context,
                                 const replication::v1::ShipRequest* request,
                                 replication::v1::ShipResponse* response) override;
  grpc::ServerBidiReactor<replication::v1::ShipRequest, replication::v1::ShipResponse>* ShipStream(
      grpc::CallbackServerContext* context) override;
  grpc::Status Promise(grpc::ServerContext* context, const replication::v1::PromiseRequest* request,
                       replication::v1::PromiseResponse* response) override;
  grpc::Status ReadLog(grpc::ServerContext* context, const replication::v1::ReadLogRequest* request,
                       replication::v1::ReadLogResponse* response) override;
  grpc::Status Restore(grpc::ServerContext* context, const replication::v1::RestoreRequest* request,
                       replication::v1::RestoreResponse* response) override;

  // Ends every ShipStream once the message it is handling is answered,
  // and refuses new ones, so that they do not keep the server's shutdown
  // waiting. The leaders' next rounds fail as calls to a stopped node do.
  void CloseStreams();

 private:
  class ShipStreamReactor;

  grpc::Status Allowed(const grpc::ServerContextBase& context);
  // One Ship's appends: handled on the calling thread, or on `pool_`
  // while the store's writes are stalled; `done` runs with the answer.
  void HandleShip(const replication::v1::ShipRequest& request, Replicator::ShipDone done);
  // A stream's OnDone.
  void ForgetStream(ShipStreamReactor* stream);

  Replicator* const replicator_;
  Authorizer* const auth_;
  const storage::Store* const store_;
  WorkerPool* const pool_;

  absl::Mutex streams_mu_;
  absl::flat_hash_set<ShipStreamReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool streams_closed_ ABSL_GUARDED_BY(streams_mu_) = false;
};

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_REPLICATION_SERVICE_H_
