#ifndef DEDUP_SERVER_DEDUP_SERVER_H_
#define DEDUP_SERVER_DEDUP_SERVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/dedup_service.h"
#include "server/server_settings.h"
#include "server/worker_pool.h"
#include "storage/store.h"

namespace dedup::server {

// A running dedupd: the store, the worker pool and the gRPC server with the
// Dedup, health and reflection services. Used by the dedupd binary and by
// tests, which start it on 127.0.0.1:0 and read the bound port.
class DedupServer {
 public:
  // Opens the data directory and starts serving. `clock` (for tests) must
  // outlive the server; null means the system clock. Errors:
  // FAILED_PRECONDITION (data directory in use or created with other
  // shards), UNAVAILABLE (cannot listen or cannot open storage).
  static absl::StatusOr<std::unique_ptr<DedupServer>> Start(
      const ServerSettings& settings, const storage::Clock* clock = nullptr);

  // Shuts down if still running.
  ~DedupServer();

  // Stops accepting calls, lets in-flight calls finish for up to `grace`
  // (then cancels them), drains the workers and closes the store, syncing
  // its WAL. Idempotent; call from one thread.
  void Shutdown(absl::Duration grace);

  // The port the gRPC server is bound to.
  int port() const { return port_; }
  storage::Store* store() const { return store_.get(); }

 private:
  DedupServer() = default;

  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<DedupService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_DEDUP_SERVER_H_
