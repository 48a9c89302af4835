#include "dedup/client/client.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "completed_cache.h"
#include "completion_thread.h"
#include "dedup/client/grpc_status.h"
#include "grpc_deadline.h"
#include "live_calls.h"
#include "node_connection.h"
#include "retry_policy.h"
#include "scheduler.h"
#include "topology.h"
#include "waiter.h"

namespace dedup::client {
namespace {

// One call across its attempts.
struct Call {
  v1::Operation op;
  SteadyTime deadline;
  OpCallback done;
  RetryPolicy::State retries;
  uint64_t generation = 0;  // Of the map the last attempt was routed by.
};

std::vector<std::string> Endpoints(const std::string& endpoint) {
  return absl::StrSplit(endpoint, ',', absl::SkipWhitespace());
}

NodeConnection::Options ConnectionOptions(const ClientOptions& options,
                                          grpc::CompletionQueue* completions) {
  NodeConnection::Options connection;
  connection.completions = completions;
  connection.credentials = options.credentials;
  connection.coalesce = options.coalesce;
  connection.batch_window = options.batch_window;
  connection.max_batch = options.max_batch;
  connection.max_batches_in_flight = options.max_batches_in_flight;
  connection.max_reconnect_backoff = options.max_reconnect_backoff;
  connection.keepalive_time = options.keepalive_time;
  connection.keepalive_timeout = options.keepalive_timeout;
  return connection;
}

}  // namespace

// Sends each call to the node that owns or leads its key's shard
// (Topology), and again as the RetryPolicy says, until it has an answer to
// hand back. Each call is routed on its own, so the items of a coalesced
// batch that fail are each sent again to their own key's node.
class Client::Impl {
 public:
  explicit Impl(const ClientOptions& options)
      : clock_(options.clock != nullptr ? options.clock : SystemClock::Default()),
        default_timeout_(options.default_timeout),
        attempt_timeout_(options.attempt_timeout),
        retry_(options.initial_backoff, options.max_backoff),
        live_calls_(std::make_unique<LiveCalls>()),
        scheduler_(std::make_unique<Scheduler>(clock_)),
        completions_(std::make_unique<CompletionThread>()),
        topology_(Endpoints(options.endpoint), ConnectionOptions(options, completions_->queue()),
                  scheduler_.get(), live_calls_.get()) {
    if (options.completed_cache_entries > 0) {
      completed_ = std::make_unique<CompletedCache>(
          static_cast<size_t>(options.completed_cache_entries), options.completed_cache_bytes,
          options.completed_cache_max_age, clock_);
    }
    topology_.Refresh();
  }

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &in_flight_));
    }
    // Nothing is in flight. A fetch of the map may be, and its answer (on
    // the completion thread) may still ask the next node, on the scheduler:
    // fetches stop first. Then no task of the scheduler is needed any more;
    // stopping it before the batchers go means none runs meanwhile.
    topology_.StopFetching();
    scheduler_.reset();
    topology_.Close();
    // The channels go with the nodes; their last users must be gone first.
    live_calls_->WaitForNone();
  }

  const Clock& clock() const { return *clock_; }
  Topology& topology() { return topology_; }

  // Whether the caller runs on one of the client's threads, in a callback:
  // a blocking call from there would wait for an answer, a retry or a
  // deadline that its own thread has to deliver.
  bool OnOwnThread() const { return completions_->IsCurrent() || scheduler_->IsCurrent(); }

  // The steady-clock deadline of a call that starts now (see CallOptions).
  SteadyTime Deadline(const CallOptions& options) const {
    const absl::Duration time_left = options.deadline == absl::InfinitePast()
                                         ? default_timeout_
                                         : options.deadline - clock_->Now();
    return clock_->SteadyNow() + time_left;
  }

  // The time left until `deadline`, for a gRPC call's own deadline.
  absl::Duration TimeLeft(SteadyTime deadline) const { return deadline - clock_->SteadyNow(); }

  // Null unless ClientOptions::completed_cache_entries.
  CompletedCache* completed() const { return completed_.get(); }

  // Runs `task` on the scheduler's thread, counted in flight so that the
  // destructor waits for it (a cached answer's callback).
  void Post(std::function<void()> task) {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    scheduler_->After(absl::ZeroDuration(), [this, task = std::move(task)] {
      task();
      absl::MutexLock lock(&mu_);
      --in_flight_;
    });
  }

  void Invoke(v1::Operation op, SteadyTime deadline, OpCallback done) {
    {
      absl::MutexLock lock(&mu_);
      ++in_flight_;
    }
    auto call = std::make_shared<Call>();
    call->op = std::move(op);
    call->deadline = deadline;
    call->done = std::move(done);
    call->retries = retry_.Start();
    Attempt(std::move(call));
  }

 private:
  void Attempt(std::shared_ptr<Call> call) {
    const SteadyTime now = clock_->SteadyNow();
    const SteadyTime attempt_deadline = attempt_timeout_ > absl::ZeroDuration()
                                            ? std::min(call->deadline, now + attempt_timeout_)
                                            : call->deadline;
    auto waiter = std::make_shared<Waiter>(
        attempt_deadline, [this, call](absl::StatusOr<v1::OperationResult> result) {
          if (!result.ok()) {
            const SteadyTime failed_at = clock_->SteadyNow();
            // The attempt's own deadline, not the call's: the node did not
            // answer in time, as when it cannot be reached.
            const absl::Status failure =
                absl::IsDeadlineExceeded(result.status()) && failed_at < call->deadline
                    ? absl::UnavailableError(absl::StrCat("no answer within ",
                                                          absl::FormatDuration(attempt_timeout_),
                                                          ": ", result.status().message()))
                    : result.status();
            const RetryPolicy::Decision next =
                retry_.Next(failure, failed_at, call->deadline, &call->retries);
            switch (next.action) {
              case RetryPolicy::Action::kRetry:
                // The node may be down, or lead the key's shard no more: the
                // retry goes by the newest map there is by then.
                topology_.RefreshThen(nullptr);
                scheduler_->After(next.wait, [this, call] { Attempt(call); });
                return;
              case RetryPolicy::Action::kReroute:
                scheduler_->After(next.wait, [this, call] { Reroute(call); });
                return;
              case RetryPolicy::Action::kReturn:
                break;
            }
          }
          Finish(*call, std::move(result));
        });
    if (now >= call->deadline) {
      waiter->Fire(absl::DeadlineExceededError("deadline passed before the call was sent"));
      return;
    }
    topology_.Route(call->op, &call->generation)->Send(call->op, std::move(waiter));
  }

  // Sends `call` again by a newer map than its last attempt went by: at
  // once if the map has changed since, else when a fetch of the map has
  // ended, or at the call's deadline if the fetch takes longer than that.
  void Reroute(std::shared_ptr<Call> call) {
    if (topology_.generation() != call->generation) return Attempt(std::move(call));
    auto sent = std::make_shared<std::atomic<bool>>(false);
    auto resend = [this, call, sent] {
      if (!sent->exchange(true)) Attempt(call);
    };
    scheduler_->At(call->deadline, resend);
    topology_.RefreshThen([this, resend] { scheduler_->After(absl::ZeroDuration(), resend); });
  }

  void Finish(Call& call, absl::StatusOr<v1::OperationResult> result) {
    OpCallback done = std::move(call.done);
    done(std::move(result));
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

  // Constant after construction.
  const Clock* const clock_;
  const absl::Duration default_timeout_;
  const absl::Duration attempt_timeout_;
  const RetryPolicy retry_;
  // Declared before the topology: destroyed after its channels.
  std::unique_ptr<LiveCalls> live_calls_;
  std::unique_ptr<Scheduler> scheduler_;
  // The thread every call completes on. Destroyed after the channels; the
  // destructor has waited for the last call by then.
  std::unique_ptr<CompletionThread> completions_;
  Topology topology_;
  std::unique_ptr<CompletedCache> completed_;

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

absl::Status BlockingFromCallback() {
  return absl::FailedPreconditionError(
      "a blocking call of dedup::client::Client from one of its own callbacks would wait for "
      "the thread that runs the callback; use the asynchronous form there");
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
  if (Endpoints(options.endpoint).empty()) {
    return absl::InvalidArgumentError("endpoint: empty");
  }
  if (options.max_batch < 1 || options.max_batch > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch: must be 1..1000, got ", options.max_batch));
  }
  if (options.max_batches_in_flight < 1 || options.max_batches_in_flight > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batches_in_flight: must be 1..16, got ", options.max_batches_in_flight));
  }
  if (options.completed_cache_entries < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "completed_cache_entries: must be 0 (off) or more, got ", options.completed_cache_entries));
  }
  if (options.completed_cache_entries > 0 && options.completed_cache_bytes == 0) {
    return absl::InvalidArgumentError("completed_cache_bytes: must be positive with a cache");
  }
  if (options.completed_cache_entries > 0 &&
      options.completed_cache_max_age <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("completed_cache_max_age: must be positive with a cache");
  }
  if (options.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("default_timeout: must be positive");
  }
  return std::unique_ptr<Client>(new Client(options));
}

Client::Client(const ClientOptions& options) : impl_(std::make_unique<Impl>(options)) {}

Client::~Client() = default;

const Clock& Client::clock() const { return impl_->clock(); }

#define DEDUP_CLIENT_CALL(Name, Request, Response, field)                                  \
  void Client::Name##Async(const v1::Request& request, Callback<v1::Response> done,        \
                           const CallOptions& options) {                                   \
    v1::Operation op;                                                                      \
    *op.mutable_##field() = request;                                                       \
    impl_->Invoke(                                                                         \
        std::move(op), impl_->Deadline(options),                                           \
        Typed<v1::Response>(                                                               \
            std::move(done), [](const v1::OperationResult& r) { return r.has_##field(); }, \
            [](v1::OperationResult* r) { return r->mutable_##field(); }));                 \
  }                                                                                        \
  absl::StatusOr<v1::Response> Client::Name(const v1::Request& request,                    \
                                            const CallOptions& options) {                  \
    if (impl_->OnOwnThread()) return BlockingFromCallback();                               \
    auto [done, future] = Promised<v1::Response>();                                        \
    Name##Async(request, std::move(done), options);                                        \
    return future.get();                                                                   \
  }

DEDUP_CLIENT_CALL(Complete, CompleteRequest, CompleteResponse, complete)
DEDUP_CLIENT_CALL(Release, ReleaseRequest, ReleaseResponse, release)
DEDUP_CLIENT_CALL(Extend, ExtendRequest, ExtendResponse, extend)
DEDUP_CLIENT_CALL(Query, QueryRequest, QueryResponse, query)
#undef DEDUP_CLIENT_CALL

// Claim as the others, but a COMPLETED answer in the cache (when there is
// one) is handed back at once, and COMPLETED answers are kept in it.
void Client::ClaimAsync(const v1::ClaimRequest& request, Callback<v1::ClaimResponse> done,
                        const CallOptions& options) {
  CompletedCache* cache = impl_->completed();
  if (cache != nullptr) {
    if (std::optional<v1::ClaimResponse> cached = cache->Find(request)) {
      // On a client thread, as every callback of the asynchronous forms.
      impl_->Post([done = std::move(done), answer = *std::move(cached)]() mutable {
        done(std::move(answer));
      });
      return;
    }
    const SteadyTime sent = impl_->clock().SteadyNow();
    Callback<v1::ClaimResponse> answer = std::move(done);
    done = [cache, request, sent, answer = std::move(answer)](absl::StatusOr<v1::ClaimResponse> r) {
      if (r.ok()) cache->Remember(request, *r, sent);
      answer(std::move(r));
    };
  }
  v1::Operation op;
  *op.mutable_claim() = request;
  impl_->Invoke(std::move(op), impl_->Deadline(options),
                Typed<v1::ClaimResponse>(
                    std::move(done), [](const v1::OperationResult& r) { return r.has_claim(); },
                    [](v1::OperationResult* r) { return r->mutable_claim(); }));
}

absl::StatusOr<v1::ClaimResponse> Client::Claim(const v1::ClaimRequest& request,
                                                const CallOptions& options) {
  if (CompletedCache* cache = impl_->completed(); cache != nullptr) {
    if (std::optional<v1::ClaimResponse> cached = cache->Find(request)) return *std::move(cached);
  }
  if (impl_->OnOwnThread()) return BlockingFromCallback();
  auto [done, future] = Promised<v1::ClaimResponse>();
  ClaimAsync(request, std::move(done), options);
  return future.get();
}

std::future<absl::StatusOr<v1::ClaimResponse>> Client::ClaimFuture(const v1::ClaimRequest& request,
                                                                   const CallOptions& options) {
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
  const SteadyTime deadline = impl_->Deadline(options);
  std::vector<v1::Record> records;
  for (NodeConnection* node : impl_->topology().Owners()) {
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadlineIn(impl_->TimeLeft(deadline)));
    std::unique_ptr<grpc::ClientReader<v1::Record>> reader = node->stub()->Scan(&context, request);
    v1::Record record;
    while (reader->Read(&record)) {
      if (request.limit() != 0 && records.size() >= request.limit()) {
        context.TryCancel();
        break;
      }
      records.push_back(std::move(record));
    }
    grpc::Status status = reader->Finish();
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      return absl::Status(FromGrpc(status).code(),
                          absl::StrCat(node->address(), ": ", status.error_message()));
    }
  }
  return records;
}

absl::Status Client::Health(const CallOptions& options) {
  const SteadyTime deadline = impl_->Deadline(options);
  for (NodeConnection* node : impl_->topology().Owners()) {
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadlineIn(impl_->TimeLeft(deadline)));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(v1::Dedup::service_full_name());
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = node->health()->Check(&context, request, &response);
    if (!status.ok()) {
      return absl::Status(FromGrpc(status).code(),
                          absl::StrCat(node->address(), ": ", status.error_message()));
    }
    if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::UnavailableError(absl::StrCat(
          node->address(), " is ",
          grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status())));
    }
  }
  return absl::OkStatus();
}

}  // namespace dedup::client
