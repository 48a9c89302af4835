#include "dedup/client/client.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "live_calls.h"
#include "scheduler.h"
#include "stream_batcher.h"
#include "waiter.h"

namespace dedup::client {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// One call across its attempts.
struct Call {
  v1::Operation op;
  absl::Time deadline;
  OpCallback done;
  absl::Duration backoff;
};

}  // namespace

class Client::Impl {
 public:
  explicit Impl(const ClientOptions& options)
      : options_(options),
        live_calls_(std::make_unique<LiveCalls>()),
        channel_(grpc::CreateChannel(options.endpoint,
                                     options.credentials != nullptr
                                         ? options.credentials
                                         : grpc::InsecureChannelCredentials())),
        stub_(v1::Dedup::NewStub(channel_)),
        health_(grpc::health::v1::Health::NewStub(channel_)),
        scheduler_(std::make_unique<Scheduler>()) {
    if (options.coalesce) {
      batcher_ = std::make_unique<StreamBatcher>(stub_.get(), scheduler_.get(), live_calls_.get(),
                                                 options.batch_window, options.max_batch);
    }
  }

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &in_flight_));
    }
    // Nothing is in flight, so no task of the scheduler is needed any more;
    // stopping it first means none runs while the batcher goes away.
    scheduler_.reset();
    batcher_.reset();
    // The channel goes with this object; its last user must be gone first.
    live_calls_->WaitForNone();
  }

  absl::Time Deadline(const CallOptions& options) const {
    return options.deadline == absl::InfinitePast() ? absl::Now() + options_.default_timeout
                                                    : options.deadline;
  }

  void Invoke(v1::Operation op, absl::Time deadline, OpCallback done) {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    auto call = std::make_shared<Call>();
    call->op = std::move(op);
    call->deadline = deadline;
    call->done = std::move(done);
    call->backoff = options_.initial_backoff;
    Attempt(std::move(call));
  }

  v1::Dedup::Stub* stub() { return stub_.get(); }
  grpc::health::v1::Health::Stub* health() { return health_.get(); }

 private:
  void Attempt(std::shared_ptr<Call> call) {
    auto waiter = std::make_shared<Waiter>(
        call->deadline, [this, call](absl::StatusOr<v1::OperationResult> result) {
          if (!result.ok() && absl::IsUnavailable(result.status())) {
            const absl::Duration wait = Jitter(call->backoff);
            if (absl::Now() + wait < call->deadline) {
              call->backoff = std::min(call->backoff * 2, options_.max_backoff);
              scheduler_->After(wait, [this, call] { Attempt(call); });
              return;
            }
          }
          Finish(*call, std::move(result));
        });
    if (absl::Now() >= call->deadline) {
      waiter->Fire(absl::DeadlineExceededError("deadline passed before the call was sent"));
    } else if (batcher_ != nullptr) {
      batcher_->Send(call->op, std::move(waiter));
    } else {
      SendUnary(call->op, std::move(waiter));
    }
  }

  void Finish(Call& call, absl::StatusOr<v1::OperationResult> result) {
    OpCallback done = std::move(call.done);
    done(std::move(result));
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

  absl::Duration Jitter(absl::Duration backoff) {
    thread_local absl::BitGen bits;
    return backoff * absl::Uniform(bits, 0.5, 1.0);
  }

  // One operation as its own unary RPC.
  template <typename Request, typename Response, typename Start, typename Put>
  void Unary(const Request& request, std::shared_ptr<Waiter> waiter, Start start, Put put) {
    struct State {
      explicit State(LiveCalls* live) : live(live) {}
      const LiveCalls::Token live;  // First: outlives context (see live_calls.h).
      grpc::ClientContext context;
      Request request;
      Response response;
    };
    auto state = std::make_shared<State>(live_calls_.get());
    state->request = request;
    state->context.set_deadline(absl::ToChronoTime(waiter->deadline()));
    start(stub_->async(), &state->context, &state->request, &state->response,
          [state, waiter, put](grpc::Status status) {
            if (!status.ok()) {
              waiter->Fire(FromGrpc(status));
              return;
            }
            v1::OperationResult result;
            *put(&result) = std::move(state->response);
            waiter->Fire(std::move(result));
          });
  }

  void SendUnary(const v1::Operation& op, std::shared_ptr<Waiter> waiter) {
    using Async = v1::Dedup::StubInterface::async_interface;
    using Done = std::function<void(grpc::Status)>;
    switch (op.op_case()) {
      case v1::Operation::kClaim:
        return Unary<v1::ClaimRequest, v1::ClaimResponse>(
            op.claim(), std::move(waiter),
            [](Async* a, grpc::ClientContext* c, const v1::ClaimRequest* q,
               v1::ClaimResponse* r, Done d) { a->Claim(c, q, r, std::move(d)); },
            [](v1::OperationResult* r) { return r->mutable_claim(); });
      case v1::Operation::kComplete:
        return Unary<v1::CompleteRequest, v1::CompleteResponse>(
            op.complete(), std::move(waiter),
            [](Async* a, grpc::ClientContext* c, const v1::CompleteRequest* q,
               v1::CompleteResponse* r, Done d) { a->Complete(c, q, r, std::move(d)); },
            [](v1::OperationResult* r) { return r->mutable_complete(); });
      case v1::Operation::kRelease:
        return Unary<v1::ReleaseRequest, v1::ReleaseResponse>(
            op.release(), std::move(waiter),
            [](Async* a, grpc::ClientContext* c, const v1::ReleaseRequest* q,
               v1::ReleaseResponse* r, Done d) { a->Release(c, q, r, std::move(d)); },
            [](v1::OperationResult* r) { return r->mutable_release(); });
      case v1::Operation::kExtend:
        return Unary<v1::ExtendRequest, v1::ExtendResponse>(
            op.extend(), std::move(waiter),
            [](Async* a, grpc::ClientContext* c, const v1::ExtendRequest* q,
               v1::ExtendResponse* r, Done d) { a->Extend(c, q, r, std::move(d)); },
            [](v1::OperationResult* r) { return r->mutable_extend(); });
      case v1::Operation::kQuery:
        return Unary<v1::QueryRequest, v1::QueryResponse>(
            op.query(), std::move(waiter),
            [](Async* a, grpc::ClientContext* c, const v1::QueryRequest* q,
               v1::QueryResponse* r, Done d) { a->Query(c, q, r, std::move(d)); },
            [](v1::OperationResult* r) { return r->mutable_query(); });
      case v1::Operation::OP_NOT_SET:
        break;
    }
    waiter->Fire(absl::InvalidArgumentError("op: not set"));
  }

  const ClientOptions options_;
  // Declared before the channel: destroyed after it.
  std::unique_ptr<LiveCalls> live_calls_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Dedup::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<StreamBatcher> batcher_;

  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {

// Adapts an OperationResult callback to the typed response of one kind.
template <typename Response, typename Has, typename Get>
OpCallback Typed(Callback<Response> done, Has has, Get get) {
  return [done = std::move(done), has, get](absl::StatusOr<v1::OperationResult> result) {
    if (!result.ok()) return done(result.status());
    if (!has(*result)) return done(absl::InternalError("dedupd answered another kind of result"));
    done(std::move(*get(&*result)));
  };
}

template <typename Response>
std::pair<Callback<Response>, std::future<absl::StatusOr<Response>>> Promised() {
  auto promise = std::make_shared<std::promise<absl::StatusOr<Response>>>();
  auto future = promise->get_future();
  return {[promise](absl::StatusOr<Response> r) { promise->set_value(std::move(r)); },
          std::move(future)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.endpoint.empty()) return absl::InvalidArgumentError("endpoint: empty");
  if (options.max_batch < 1 || options.max_batch > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch: must be 1..1000, got ", options.max_batch));
  }
  if (options.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("default_timeout: must be positive");
  }
  return std::unique_ptr<Client>(new Client(options));
}

Client::Client(const ClientOptions& options)
    : options_(options), impl_(std::make_unique<Impl>(options)) {}

Client::~Client() = default;

#define DEDUP_CLIENT_CALL(Name, Request, Response, field)                                    \
  void Client::Name##Async(const v1::Request& request, Callback<v1::Response> done,          \
                           const CallOptions& options) {                                     \
    v1::Operation op;                                                                        \
    *op.mutable_##field() = request;                                                         \
    impl_->Invoke(std::move(op), impl_->Deadline(options),                                   \
                  Typed<v1::Response>(                                                       \
                      std::move(done),                                                       \
                      [](const v1::OperationResult& r) { return r.has_##field(); },          \
                      [](v1::OperationResult* r) { return r->mutable_##field(); }));         \
  }                                                                                          \
  absl::StatusOr<v1::Response> Client::Name(const v1::Request& request,                      \
                                            const CallOptions& options) {                    \
    auto [done, future] = Promised<v1::Response>();                                          \
    Name##Async(request, std::move(done), options);                                          \
    return future.get();                                                                     \
  }

DEDUP_CLIENT_CALL(Claim, ClaimRequest, ClaimResponse, claim)
DEDUP_CLIENT_CALL(Complete, CompleteRequest, CompleteResponse, complete)
DEDUP_CLIENT_CALL(Release, ReleaseRequest, ReleaseResponse, release)
DEDUP_CLIENT_CALL(Extend, ExtendRequest, ExtendResponse, extend)
DEDUP_CLIENT_CALL(Query, QueryRequest, QueryResponse, query)
#undef DEDUP_CLIENT_CALL

std::future<absl::StatusOr<v1::ClaimResponse>> Client::ClaimFuture(
    const v1::ClaimRequest& request, const CallOptions& options) {
  auto [done, future] = Promised<v1::ClaimResponse>();
  ClaimAsync(request, std::move(done), options);
  return std::move(future);
}

std::future<absl::StatusOr<v1::CompleteResponse>> Client::CompleteFuture(
    const v1::CompleteRequest& request, const CallOptions& options) {
  auto [done, future] = Promised<v1::CompleteResponse>();
  CompleteAsync(request, std::move(done), options);
  return std::move(future);
}

absl::StatusOr<std::vector<v1::Record>> Client::Scan(const v1::ScanRequest& request,
                                                     const CallOptions& options) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(impl_->Deadline(options)));
  std::unique_ptr<grpc::ClientReader<v1::Record>> reader =
      impl_->stub()->Scan(&context, request);
  std::vector<v1::Record> records;
  v1::Record record;
  while (reader->Read(&record)) records.push_back(std::move(record));
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpc(status);
  return records;
}

absl::Status Client::Health(const CallOptions& options) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(impl_->Deadline(options)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(v1::Dedup::service_full_name());
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = impl_->health()->Check(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(
        "dedupd is ", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                          response.status())));
  }
  return absl::OkStatus();
}

}  // namespace dedup::client
