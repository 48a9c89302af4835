#include "server/cluster/peer_shipper.h"

namespace dedup::server::cluster {

namespace rv1 = ::dedup::replication::v1;

PeerShipper::~PeerShipper() {
  if (stream_ != nullptr) End(/*cancel=*/true, absl::InfinitePast());
  queue_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
  }
}

grpc::Status PeerShipper::Ship(const std::shared_ptr<Stub>& stub, const rv1::ShipRequest& request,
                               rv1::ShipResponse* response, absl::Time deadline) {
  if (!streaming()) return Call(stub.get(), request, response, deadline);
  if (stream_ != nullptr && stub != stub_) End(/*cancel=*/true, deadline);
  Wait wait = Wait::kDone;
  if (stream_ == nullptr) {
    stub_ = stub;
    context_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub->PrepareAsyncShipStream(context_.get(), &queue_);
    stream_->StartCall(this);
    pending_ = true;
    wait = Await(deadline);
  }
  if (wait == Wait::kDone) {
    stream_->Write(request, this);
    pending_ = true;
    wait = Await(deadline);
  }
  if (wait == Wait::kDone) {
    stream_->Read(response, this);
    pending_ = true;
    wait = Await(deadline);
  }
  if (wait == Wait::kDone) return grpc::Status::OK;
  grpc::Status status = End(/*cancel=*/wait == Wait::kTimedOut, deadline);
  if (status.error_code() != grpc::StatusCode::UNIMPLEMENTED) return status;
  // A peer from before ShipStream: it handled nothing of this round, which
  // goes as a Ship call at once.
  calls_until_ = absl::Now() + kCallsAfterUnimplemented;
  return Call(stub.get(), request, response, deadline);
}

grpc::Status PeerShipper::Call(Stub* stub, const rv1::ShipRequest& request,
                               rv1::ShipResponse* response, absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  return stub->Ship(&context, request, response);
}

PeerShipper::Wait PeerShipper::Await(absl::Time deadline) {
  void* tag = nullptr;
  bool ok = false;
  switch (queue_.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline))) {
    case grpc::CompletionQueue::GOT_EVENT:
      pending_ = false;
      return ok ? Wait::kDone : Wait::kFailed;
    case grpc::CompletionQueue::TIMEOUT:
      return Wait::kTimedOut;
    case grpc::CompletionQueue::SHUTDOWN:
      break;
  }
  return Wait::kFailed;
}

grpc::Status PeerShipper::End(bool cancel, absl::Time deadline) {
  void* tag = nullptr;
  bool ok = false;
  if (cancel) context_->TryCancel();
  if (pending_) {
    // The operation that timed out ends once cancelled.
    queue_.Next(&tag, &ok);
    pending_ = false;
  }
  grpc::Status status;
  stream_->Finish(&status, this);
  pending_ = true;
  if (cancel) {
    queue_.Next(&tag, &ok);
  } else if (Await(deadline) == Wait::kTimedOut) {
    // The stream broke, yet the peer's status does not come.
    cancel = true;
    context_->TryCancel();
    queue_.Next(&tag, &ok);
  }
  pending_ = false;
  stream_.reset();
  context_.reset();
  stub_.reset();
  if (cancel) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "the follower did not answer a ShipStream round in time");
  }
  if (status.ok()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the follower ended the ShipStream");
  }
  return status;
}

}  // namespace dedup::server::cluster
