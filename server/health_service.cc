#include "server/health_service.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dedup::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

constexpr char kShuttingDown[] = "dedupd is shutting down";

}  // namespace

// One Watch call. Its state is guarded by the service's mutex, which the
// service holds when it sends a status or ends the call. Writes go one at
// a time; a status set while one is being written waits, and only the
// newest such status is written. Deletes itself in OnDone, which gRPC
// calls only after Finish, and Finish is called exactly once (finished_).
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string name) : service_(service), name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // Tells the thread-safety analysis that the lock the caller holds, its
  // service's, is this watcher's too.
  void AssertLocked() const ABSL_ASSERT_EXCLUSIVE_LOCK(service_->mu_) {
    service_->mu_.AssertHeld();
  }

  // Writes `status` now, or after the write under way; nothing when it is
  // the status written last.
  void Send(Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finished_ || cancelled_ || ending_ || last_ == status) return;
    last_ = status;
    if (writing_) {
      next_ = status;
      return;
    }
    Write(status);
  }

  // Ends the call UNAVAILABLE once what was sent is written.
  void End() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    ending_ = true;
    if (!writing_) FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, kShuttingDown));
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&service_->mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
    if (next_.has_value() && !cancelled_) {
      const Status next = *next_;
      next_.reset();
      Write(next);
      return;
    }
    if (cancelled_) {
      FinishOnce(grpc::Status::CANCELLED);
    } else if (ending_) {
      FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, kShuttingDown));
    }
  }

  void OnCancel() override {
    absl::MutexLock lock(&service_->mu_);
    cancelled_ = true;
    if (!writing_) FinishOnce(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&service_->mu_);
      service_->watchers_.erase(this);
    }
    delete this;
  }

 private:
  void Write(Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    writing_ = true;
    response_.set_status(status);
    StartWrite(&response_);
  }

  // gRPC runs neither OnWriteDone nor OnDone on this thread from inside
  // StartWrite or Finish, so both may be called with the lock held.
  void FinishOnce(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  HealthService* const service_;
  const std::string name_;
  HealthCheckResponse response_ ABSL_GUARDED_BY(service_->mu_);  // The write under way's.
  std::optional<Status> last_ ABSL_GUARDED_BY(service_->mu_);
  std::optional<Status> next_ ABSL_GUARDED_BY(service_->mu_);
  bool writing_ ABSL_GUARDED_BY(service_->mu_) = false;
  bool ending_ ABSL_GUARDED_BY(service_->mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(service_->mu_) = false;
  bool finished_ ABSL_GUARDED_BY(service_->mu_) = false;
};

HealthService::HealthService() {
  absl::MutexLock lock(&mu_);
  statuses_[""] = HealthCheckResponse::SERVING;
}

// gRPC's server, destroyed first, has ended every call by now.
HealthService::~HealthService() = default;

HealthService::Status HealthService::StatusOf(const std::string& service) const {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

void HealthService::Set(const std::string& service, Status status) {
  statuses_[service] = status;
  for (Watcher* watcher : watchers_) {
    if (watcher->name() != service) continue;
    watcher->AssertLocked();
    watcher->Send(status);
  }
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  Set(service, serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
}

void HealthService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  std::vector<std::string> services;
  for (const auto& [service, status] : statuses_) services.push_back(service);
  for (const std::string& service : services) {
    Set(service, serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [service, status] : statuses_) status = HealthCheckResponse::NOT_SERVING;
  for (Watcher* watcher : watchers_) {
    watcher->AssertLocked();
    watcher->Send(HealthCheckResponse::NOT_SERVING);
    watcher->End();
  }
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Status status;
  {
    absl::MutexLock lock(&mu_);
    status = StatusOf(request->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
  } else {
    response->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* /*context*/, const HealthCheckRequest* request) {
  auto* watcher = new Watcher(this, request->service());
  absl::MutexLock lock(&mu_);
  // Listed even once shut down: OnDone takes it off the list either way.
  watchers_.insert(watcher);
  watcher->AssertLocked();
  if (shut_down_) {
    watcher->Send(HealthCheckResponse::NOT_SERVING);
    watcher->End();
  } else {
    watcher->Send(StatusOf(request->service()));
  }
  return watcher;
}

}  // namespace dedup::server
