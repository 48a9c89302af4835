#ifndef DEDUP_SERVER_DEDUP_SERVER_H_
#define DEDUP_SERVER_DEDUP_SERVER_H_

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/cluster/etcd_client.h"
#include "server/cluster/replication_metrics.h"
#include "server/cluster/replication_service.h"
#include "server/cluster/replicator.h"
#include "server/dedup_service.h"
#include "server/health_service.h"
#include "server/http_endpoint.h"
#include "server/memory_release.h"
#include "server/metrics.h"
#include "server/process_metrics.h"
#include "server/server_settings.h"
#include "server/storage_monitor.h"
#include "server/worker_pool.h"
#include "storage/store.h"

namespace dedup::server {

// A running dedupd: the store, the worker pool, the gRPC server with the
// Dedup, health and reflection services, and the HTTP endpoint with
// /metrics, /healthz and /readyz. Used by the dedupd binary and by tests,
// which start it on 127.0.0.1:0 and read the bound ports.
//
// Health: gRPC health (service "dedup.v1.Dedup" and "") and /readyz say
// SERVING / 200 while serving and storage accepts writes. They turn
// NOT_SERVING / 503 when shutdown begins, while the disk is full (and back
// once the store recovers) and when storage has failed for good. /healthz
// is 200 unless storage has failed for good: a full disk is not a reason
// to restart the process, which would not free any space.
class DedupServer {
 public:
  // Opens the data directory and starts serving. `clock` (for tests) must
  // outlive the server; null means the system clock. Errors:
  // FAILED_PRECONDITION (data directory in use or created with other
  // shards), UNAVAILABLE (cannot listen or cannot open storage).
  static absl::StatusOr<std::unique_ptr<DedupServer>> Start(const ServerSettings& settings,
                                                            const storage::Clock* clock = nullptr);

  // Shuts down if still running.
  ~DedupServer();

  // Stops accepting calls, lets in-flight calls finish for up to `grace`
  // (then cancels them), drains the workers and closes the store, syncing
  // its WAL. Idempotent; call from one thread.
  void Shutdown(absl::Duration grace);

  // The port the gRPC server is bound to.
  int port() const { return port_; }
  // The port of /metrics, /healthz and /readyz; 0 when they are off.
  int http_port() const { return http_ != nullptr ? http_->port() : 0; }
  // The port of the probes-only endpoint; 0 when it is off.
  int probe_port() const { return probes_ != nullptr ? probes_->port() : 0; }
  storage::Store* store() const { return store_.get(); }
  // The storage workers, for tests that occupy them.
  WorkerPool* pool() const { return pool_.get(); }
  // What each tenant holds now, for tests.
  const TenantQuota& tenants() const { return service_->tenants(); }
  // The calls' service, for tests that submit tasks to it directly.
  DedupService* service() const { return service_.get(); }
  Metrics* metrics() const { return metrics_.get(); }
  // Reads storage statistics and health now instead of at the next interval.
  void RefreshStorageStats() { monitor_->Refresh(); }
  // What /readyz answers 200 for: serving, not draining, storage healthy,
  // and no connection refused for lack of descriptors in the last second.
  bool Ready() const;

 private:
  DedupServer() = default;
  // Opens the replication log, registers with etcd and starts the
  // replicator; the store then commits through it.
  absl::Status JoinReplicatedCluster(const ServerSettings& settings);
  // Where storage stands, as the monitor last reported it.
  enum class StorageHealth { kHealthy, kOutOfSpace, kFailed };
  void OnStorageChange(const absl::Status& health);
  // Applies limits.max_connections and max_connections_per_address to the
  // gRPC port (connection_gate.h).
  void GuardConnections(const ServerLimits& limits);
  // Whether accepting failed for lack of descriptors in the last second.
  bool ShortOfDescriptors() const;
  HttpResponse Probe(bool readiness) const;
  // /metrics: the registry and the process metrics, read now.
  HttpResponse Scrape() const;

  std::atomic<bool> draining_{false};
  std::atomic<StorageHealth> storage_{StorageHealth::kHealthy};
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Authorizer> auth_;
  std::unique_ptr<storage::Store> store_;
  // Replicated cluster only (docs/replication.md).
  std::unique_ptr<cluster::EtcdClient> etcd_;
  std::unique_ptr<storage::ReplicationLog> replication_log_;
  std::unique_ptr<cluster::Replicator> replicator_;
  std::unique_ptr<cluster::ReplicationService> replication_service_;
  std::unique_ptr<cluster::ReplicationMetrics> replication_metrics_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<WorkerPool> scan_pool_;
  // Replicated: the followers' Ship calls that may wait for a disk
  // (replication_service.h).
  std::unique_ptr<WorkerPool> replication_pool_;
  // Before service_, which notes freed answers to it.
  std::unique_ptr<MemoryRelease> memory_release_;
  std::unique_ptr<DedupService> service_;
  // Before grpc_server_, which is destroyed first.
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<StorageMonitor> monitor_;
  std::unique_ptr<HttpEndpoint> http_;
  std::unique_ptr<HttpEndpoint> probes_;
  ProcessMetrics process_metrics_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_DEDUP_SERVER_H_
