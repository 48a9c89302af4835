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

void ReplicationService::HandleShip(const replication::v1::ShipRequest& request,
                                    Replicator::ShipDone done) {
  if (!store_->WritesStalled()) {
    // On this thread; in fsync the answer comes from the thread whose
    // sync covers the appends.
    replicator_->HandleShipAsync(request, std::move(done));
    return;
  }
  // The pool takes copyable tasks only.
  auto shared = std::make_shared<Replicator::ShipDone>(std::move(done));
  switch (pool_->Submit(
      [this, &request, shared] { std::move (*shared)(replicator_->HandleShip(request)); })) {
    case WorkerPool::Admission::kQueued:
      break;
    case WorkerPool::Admission::kFull:
      // The leader sends again after a pause.
      std::move (*shared)(
          absl::ResourceExhaustedError("too many replication calls waiting for storage"));
      break;
    case WorkerPool::Admission::kShuttingDown:
      std::move (*shared)(absl::UnavailableError("shutting down"));
      break;
  }
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
  HandleShip(*request, [reactor, response](absl::StatusOr<replication::v1::ShipResponse> shipped) {
    if (!shipped.ok()) {
      reactor->Finish(ToGrpcStatus(shipped.status()));
      return;
    }
    *response = std::move(*shipped);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

// One leader's ShipStream. At most one message is in hand at a time: read,
// handled, answered, then the next read. The grants are checked for every
// message, as they are for every Ship call.
class ReplicationService::ShipStreamReactor final
    : public grpc::ServerBidiReactor<replication::v1::ShipRequest, replication::v1::ShipResponse> {
 public:
  ShipStreamReactor(ReplicationService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {}

  // Either the first read, or, refused, the end.
  void Start(const grpc::Status& refused) {
    if (!refused.ok()) return End(refused);
    ReadNext();
  }

  // From ReplicationService::CloseStreams, under its lock: true when the
  // caller is to Finish this stream now (it waits for a message); else it
  // ends once the message in hand is answered.
  bool Close() {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    if (!reading_ || read_starters_ > 0 || finished_) return false;
    finished_ = true;
    return true;
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (finished_) return;  // Closed while reading.
    }
    if (!ok) return End(grpc::Status::OK);  // The leader ended the stream.
    if (grpc::Status allowed = service_->Allowed(*context_); !allowed.ok()) return End(allowed);
    service_->HandleShip(request_, [this](absl::StatusOr<replication::v1::ShipResponse> shipped) {
      if (!shipped.ok()) return End(ToGrpcStatus(shipped.status()));
      response_ = std::move(*shipped);
      StartWrite(&response_);
    });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End(grpc::Status::OK);  // Cancelled: the leader is gone.
    ReadNext();
  }

  void OnDone() override {
    service_->ForgetStream(this);
    delete this;
  }

  static grpc::Status ShutdownStatus() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the node is shutting down");
  }

 private:
  // The next read, unless closing. Close does not Finish while a read is
  // being started (the read may even complete meanwhile, on another
  // thread); this does, if Close came meanwhile and the read is pending.
  void ReadNext() {
    bool read = false;
    {
      absl::MutexLock lock(&mu_);
      read = !closing_;
      if (read) {
        reading_ = true;
        ++read_starters_;
      }
    }
    if (!read) return End(ShutdownStatus());
    request_.Clear();
    StartRead(&request_);
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      --read_starters_;
      if (closing_ && reading_ && read_starters_ == 0 && !finished_) finish = finished_ = true;
    }
    if (finish) Finish(ShutdownStatus());
  }
  // Finish, once.
  void End(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(status);
  }

  ReplicationService* const service_;
  grpc::CallbackServerContext* const context_;
  replication::v1::ShipRequest request_;
  replication::v1::ShipResponse response_;
  absl::Mutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;   // A read is outstanding.
  int read_starters_ ABSL_GUARDED_BY(mu_) = 0;  // Threads inside StartRead.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;   // CloseStreams: no more reads.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called, or about to be.
};

grpc::ServerBidiReactor<replication::v1::ShipRequest, replication::v1::ShipResponse>*
ReplicationService::ShipStream(grpc::CallbackServerContext* context) {
  auto* reactor = new ShipStreamReactor(this, context);
  grpc::Status refused = Allowed(*context);
  if (refused.ok()) {
    absl::MutexLock lock(&streams_mu_);
    if (streams_closed_) {
      refused = ShipStreamReactor::ShutdownStatus();
    } else {
      streams_.insert(reactor);
    }
  }
  reactor->Start(refused);
  return reactor;
}

void ReplicationService::ForgetStream(ShipStreamReactor* stream) {
  absl::MutexLock lock(&streams_mu_);
  streams_.erase(stream);
}

void ReplicationService::CloseStreams() {
  std::vector<ShipStreamReactor*> finish_now;
  {
    absl::MutexLock lock(&streams_mu_);
    streams_closed_ = true;
    for (ShipStreamReactor* stream : streams_) {
      if (stream->Close()) finish_now.push_back(stream);
    }
  }
  // gRPC deletes none of these before its Finish.
  for (ShipStreamReactor* stream : finish_now) stream->Finish(ShipStreamReactor::ShutdownStatus());
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
