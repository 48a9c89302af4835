#ifndef DEDUP_SERVER_HEALTH_SERVICE_H_
#define DEDUP_SERVER_HEALTH_SERVICE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace dedup::server {

// The standard gRPC health service (grpc.health.v1.Health), Check and
// Watch, for the server as a whole ("") and for each service named with
// SetServingStatus. It answers as gRPC's built-in one does, with one
// difference: Shutdown tells every Watch NOT_SERVING and then ends it
// (UNAVAILABLE). The built-in one leaves each Watch open, and a load
// balancer's health check, which watches for as long as the server lives,
// would make every shutdown wait out its whole grace.
class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  // The server as a whole ("") is SERVING until told otherwise.
  HealthService();
  ~HealthService() override;

  // What Check answers and Watch reports for `service`; "" is the server
  // as a whole. Ignored after Shutdown.
  void SetServingStatus(const std::string& service, bool serving);
  // The same for every service known, the server as a whole included.
  void SetServingStatus(bool serving);
  // Every service NOT_SERVING from now on; every Watch is told so and
  // ended, and a Watch started later is ended at once.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class Watcher;
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // SERVICE_UNKNOWN for a service never named.
  Status StatusOf(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets `service`'s status and tells its watchers when it changed.
  void Set(const std::string& service, Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Also every Watcher's state: watches are few and change seldom.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Status> statuses_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_HEALTH_SERVICE_H_
