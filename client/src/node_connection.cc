#include "node_connection.h"

#include <algorithm>
#include <utility>

#include "completion_thread.h"
#include "dedup/client/grpc_status.h"
#include "grpc_deadline.h"
#include "grpcpp/create_channel.h"

namespace dedup::client {

namespace {

std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                       const NodeConnection::Options& options) {
  grpc::ChannelArguments arguments;
  if (options.max_reconnect_backoff > absl::ZeroDuration()) {
    const int max_ms = static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff));
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
    // gRPC's first wait is a second, which would be the longest one too.
    arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(max_ms, 100));
  }
  if (options.keepalive_time > absl::ZeroDuration()) {
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                     static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
    if (options.keepalive_timeout > absl::ZeroDuration()) {
      arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                       static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
    }
    // Only while calls are open, and on: a coalescing Stream open with
    // nothing to send would otherwise stop pinging after two pings.
    arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
    arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  return grpc::CreateCustomChannel(
      address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
      arguments);
}

}  // namespace

NodeConnection::NodeConnection(std::string address, const Options& options, Scheduler* scheduler,
                               LiveCalls* live)
    : address_(std::move(address)),
      clock_(scheduler->clock()),
      live_calls_(live),
      completions_(options.completions),
      channel_(Channel(address_, options)),
      stub_(v1::Dedup::NewStub(channel_)),
      health_(grpc::health::v1::Health::NewStub(channel_)) {
  if (options.coalesce) {
    batcher_ = std::make_unique<StreamBatcher>(stub_.get(), options.completions, scheduler, live,
                                               options.batch_window, options.max_batch,
                                               options.max_batches_in_flight);
  }
}

void NodeConnection::Send(const v1::Operation& op, std::shared_ptr<Waiter> waiter) {
  if (batcher_ != nullptr) {
    batcher_->Send(op, std::move(waiter));
  } else {
    SendUnary(op, std::move(waiter));
  }
}

// One operation as its own unary RPC.
template <typename Request, typename Response, typename Prepare, typename Put>
void NodeConnection::Unary(const Request& request, std::shared_ptr<Waiter> waiter, Prepare prepare,
                           Put put) {
  struct State {
    explicit State(LiveCalls* live) : live(live) {}
    const LiveCalls::Token live;  // First: outlives context (see live_calls.h).
    grpc::ClientContext context;
    Request request;
    Response response;
  };
  auto state = std::make_shared<State>(live_calls_);
  state->request = request;
  state->context.set_deadline(GrpcDeadlineIn(waiter->deadline() - clock_.SteadyNow()));
  StartUnary<Response>(prepare(stub_.get(), &state->context, state->request, completions_),
                       &state->response, [state, waiter, put](const grpc::Status& status) {
                         if (!status.ok()) {
                           waiter->Fire(FromGrpc(status));
                           return;
                         }
                         v1::OperationResult result;
                         *put(&result) = std::move(state->response);
                         waiter->Fire(std::move(result));
                       });
}

void NodeConnection::SendUnary(const v1::Operation& op, std::shared_ptr<Waiter> waiter) {
  switch (op.op_case()) {
    case v1::Operation::kClaim:
      return Unary<v1::ClaimRequest, v1::ClaimResponse>(
          op.claim(), std::move(waiter),
          [](v1::Dedup::Stub* s, grpc::ClientContext* c, const v1::ClaimRequest& q,
             grpc::CompletionQueue* cq) { return s->PrepareAsyncClaim(c, q, cq); },
          [](v1::OperationResult* r) { return r->mutable_claim(); });
    case v1::Operation::kComplete:
      return Unary<v1::CompleteRequest, v1::CompleteResponse>(
          op.complete(), std::move(waiter),
          [](v1::Dedup::Stub* s, grpc::ClientContext* c, const v1::CompleteRequest& q,
             grpc::CompletionQueue* cq) { return s->PrepareAsyncComplete(c, q, cq); },
          [](v1::OperationResult* r) { return r->mutable_complete(); });
    case v1::Operation::kRelease:
      return Unary<v1::ReleaseRequest, v1::ReleaseResponse>(
          op.release(), std::move(waiter),
          [](v1::Dedup::Stub* s, grpc::ClientContext* c, const v1::ReleaseRequest& q,
             grpc::CompletionQueue* cq) { return s->PrepareAsyncRelease(c, q, cq); },
          [](v1::OperationResult* r) { return r->mutable_release(); });
    case v1::Operation::kExtend:
      return Unary<v1::ExtendRequest, v1::ExtendResponse>(
          op.extend(), std::move(waiter),
          [](v1::Dedup::Stub* s, grpc::ClientContext* c, const v1::ExtendRequest& q,
             grpc::CompletionQueue* cq) { return s->PrepareAsyncExtend(c, q, cq); },
          [](v1::OperationResult* r) { return r->mutable_extend(); });
    case v1::Operation::kQuery:
      return Unary<v1::QueryRequest, v1::QueryResponse>(
          op.query(), std::move(waiter),
          [](v1::Dedup::Stub* s, grpc::ClientContext* c, const v1::QueryRequest& q,
             grpc::CompletionQueue* cq) { return s->PrepareAsyncQuery(c, q, cq); },
          [](v1::OperationResult* r) { return r->mutable_query(); });
    case v1::Operation::OP_NOT_SET:
      break;
  }
  waiter->Fire(absl::InvalidArgumentError("op: not set"));
}

}  // namespace dedup::client
