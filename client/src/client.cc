#include "dedup/client/client.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "dedup/client/grpc_status.h"
#include "live_calls.h"
#include "node_connection.h"
#include "scheduler.h"
#include "storage/key_codec.h"
#include "waiter.h"

namespace dedup::client {
namespace {

// One call across its attempts.
struct Call {
  v1::Operation op;
  absl::Time deadline;
  OpCallback done;
  absl::Duration backoff;
  int reroutes = 0;  // Topology refreshes after FAILED_PRECONDITION.
};

constexpr int kMaxReroutes = 2;
constexpr absl::Duration kTopologyTimeout = absl::Seconds(2);

const std::string& OpNamespace(const v1::Operation& op) {
  switch (op.op_case()) {
    case v1::Operation::kClaim:
      return op.claim().namespace_();
    case v1::Operation::kComplete:
      return op.complete().namespace_();
    case v1::Operation::kRelease:
      return op.release().namespace_();
    case v1::Operation::kExtend:
      return op.extend().namespace_();
    default:
      return op.query().namespace_();
  }
}

const std::string& OpKey(const v1::Operation& op) {
  switch (op.op_case()) {
    case v1::Operation::kClaim:
      return op.claim().key();
    case v1::Operation::kComplete:
      return op.complete().key();
    case v1::Operation::kRelease:
      return op.release().key();
    case v1::Operation::kExtend:
      return op.extend().key();
    default:
      return op.query().key();
  }
}

}  // namespace

// Routing: with a cluster topology every key goes straight to the node
// owning its shard, each node over its own channel (and Stream), so a node
// that is down fails only its own keys. A FAILED_PRECONDITION from a node
// (the key is not its own: the map changed) refreshes the topology and
// re-sends the call.
class Client::Impl {
 public:
  explicit Impl(const ClientOptions& options)
      : options_(options),
        seeds_(absl::StrSplit(options.endpoint, ',', absl::SkipWhitespace())),
        live_calls_(std::make_unique<LiveCalls>()),
        scheduler_(std::make_unique<Scheduler>()) {
    {
      absl::MutexLock lock(&topology_mu_);
      owners_ = {NodeFor(seeds_.front())};
    }
    RefreshTopology();
  }

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &in_flight_));
    }
    // Nothing is in flight, so no task of the scheduler is needed any more;
    // stopping it first means none runs while the batchers go away.
    scheduler_.reset();
    for (auto& [address, node] : nodes_) node->Close();
    // The channels go with the nodes; their last users must be gone first.
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

  // Every node the topology names (one when not a cluster).
  std::vector<NodeConnection*> Owners() {
    absl::MutexLock lock(&topology_mu_);
    std::vector<NodeConnection*> unique;
    for (NodeConnection* node : owners_) {
      if (std::find(unique.begin(), unique.end(), node) == unique.end()) unique.push_back(node);
    }
    return unique;
  }

  // Asks the known nodes, then the seeds, for the shard map and adopts the
  // first answer. Blocks for at most a few seconds.
  void RefreshTopology() {
    std::vector<std::string> candidates;
    for (NodeConnection* node : Owners()) candidates.push_back(node->address());
    candidates.insert(candidates.end(), seeds_.begin(), seeds_.end());
    for (const std::string& address : candidates) {
      NodeConnection* node;
      {
        absl::MutexLock lock(&topology_mu_);
        node = NodeFor(address);
      }
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + kTopologyTimeout));
      v1::TopologyResponse topology;
      if (!node->stub()->Topology(&context, v1::TopologyRequest(), &topology).ok()) continue;
      absl::MutexLock lock(&topology_mu_);
      if (topology.nodes_size() <= 1) {
        shard_count_ = 0;
        owners_ = {node};
      } else {
        shard_count_ = topology.shard_count();
        owners_.clear();
        for (const std::string& owner : topology.nodes()) owners_.push_back(NodeFor(owner));
      }
      return;
    }
  }

 private:
  NodeConnection* NodeFor(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(topology_mu_) {
    std::unique_ptr<NodeConnection>& node = nodes_[address];
    if (node == nullptr) {
      NodeConnection::Options options;
      options.credentials = options_.credentials;
      options.coalesce = options_.coalesce;
      options.batch_window = options_.batch_window;
      options.max_batch = options_.max_batch;
      node =
          std::make_unique<NodeConnection>(address, options, scheduler_.get(), live_calls_.get());
    }
    return node.get();
  }

  NodeConnection* Route(const v1::Operation& op) {
    absl::MutexLock lock(&topology_mu_);
    if (shard_count_ == 0 || owners_.size() <= 1) return owners_.front();
    const uint32_t shard = storage::ShardOf(OpNamespace(op), OpKey(op), shard_count_);
    return owners_[storage::NodeOfShard(shard, static_cast<uint32_t>(owners_.size()))];
  }

  void Attempt(std::shared_ptr<Call> call) {
    auto waiter = std::make_shared<Waiter>(
        call->deadline, [this, call](absl::StatusOr<v1::OperationResult> result) {
          const absl::Duration wait = Jitter(call->backoff);
          if (!result.ok() && absl::IsUnavailable(result.status()) &&
              absl::Now() + wait < call->deadline) {
            call->backoff = std::min(call->backoff * 2, options_.max_backoff);
            scheduler_->After(wait, [this, call] { Attempt(call); });
            return;
          }
          if (!result.ok() && absl::IsFailedPrecondition(result.status()) &&
              call->reroutes < kMaxReroutes && absl::Now() < call->deadline) {
            ++call->reroutes;
            scheduler_->After(absl::ZeroDuration(), [this, call] {
              RefreshTopology();
              Attempt(call);
            });
            return;
          }
          Finish(*call, std::move(result));
        });
    if (absl::Now() >= call->deadline) {
      waiter->Fire(absl::DeadlineExceededError("deadline passed before the call was sent"));
      return;
    }
    Route(call->op)->Send(call->op, std::move(waiter));
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

  const ClientOptions options_;
  const std::vector<std::string> seeds_;
  // Declared before the nodes: destroyed after their channels.
  std::unique_ptr<LiveCalls> live_calls_;
  std::unique_ptr<Scheduler> scheduler_;

  absl::Mutex topology_mu_;
  // Every node ever known, by address; never removed while the client lives.
  std::map<std::string, std::unique_ptr<NodeConnection>> nodes_ ABSL_GUARDED_BY(topology_mu_);
  uint32_t shard_count_ ABSL_GUARDED_BY(topology_mu_) = 0;             // 0: not a cluster.
  std::vector<NodeConnection*> owners_ ABSL_GUARDED_BY(topology_mu_);  // By node index.

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
  if (std::vector<std::string>(absl::StrSplit(options.endpoint, ',', absl::SkipWhitespace()))
          .empty()) {
    return absl::InvalidArgumentError("endpoint: empty");
  }
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
    auto [done, future] = Promised<v1::Response>();                                        \
    Name##Async(request, std::move(done), options);                                        \
    return future.get();                                                                   \
  }

DEDUP_CLIENT_CALL(Claim, ClaimRequest, ClaimResponse, claim)
DEDUP_CLIENT_CALL(Complete, CompleteRequest, CompleteResponse, complete)
DEDUP_CLIENT_CALL(Release, ReleaseRequest, ReleaseResponse, release)
DEDUP_CLIENT_CALL(Extend, ExtendRequest, ExtendResponse, extend)
DEDUP_CLIENT_CALL(Query, QueryRequest, QueryResponse, query)
#undef DEDUP_CLIENT_CALL

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
  std::vector<v1::Record> records;
  for (NodeConnection* node : impl_->Owners()) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(impl_->Deadline(options)));
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
  for (NodeConnection* node : impl_->Owners()) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(impl_->Deadline(options)));
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
