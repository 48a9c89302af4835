#include "server/dedup_service.h"

#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/logging.h"
#include "server/response_builder.h"
#include "server/scan_reactor.h"
#include "server/status_convert.h"
#include "server/stream_reactor.h"
#include "spdlog/spdlog.h"
#include "storage/key_codec.h"

namespace dedup::server {
absl::Status CheckBatchSize(const v1::BatchRequest& request) {
  if (request.operations_size() > kMaxBatchOperations) {
    return absl::InvalidArgumentError(absl::StrCat("operations: at most ", kMaxBatchOperations,
                                                   " per batch, got ", request.operations_size()));
  }
  return absl::OkStatus();
}

DedupService::DedupService(storage::Store* store, WorkerPool* pool, WorkerPool* scan_pool,
                           Metrics* metrics, Authorizer* auth,
                           std::shared_ptr<const ShardMap> shards, RequestTranslator translator,
                           const ServerLimits& limits, Execution execution)
    : store_(store),
      pool_(pool),
      scan_pool_(scan_pool),
      metrics_(metrics),
      auth_(auth),
      shards_(std::move(shards)),
      translator_(std::move(translator)),
      limits_(limits),
      execution_(execution),
      tenants_({limits.max_open_streams_per_identity, limits.max_queued_tasks_per_identity,
                limits.max_operations_per_second_per_identity}) {}

grpc::Status AbandonedStatus(grpc::CallbackServerContext* context) {
  if (context->deadline() <= std::chrono::system_clock::now()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "deadline passed while the call waited for a worker");
  }
  if (context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while waiting for a worker");
  }
  return grpc::Status::OK;
}

namespace {

// How a refusal names the tenant: the caller's own identity.
std::string TenantName(const Caller& caller) {
  return absl::StrCat("identity '", caller.identity, "'");
}

grpc::Status FromAdmission(WorkerPool::Admission admission) {
  switch (admission) {
    case WorkerPool::Admission::kQueued:
      return grpc::Status::OK;
    case WorkerPool::Admission::kFull:
      return QueueFullStatus();
    case WorkerPool::Admission::kShuttingDown:
      break;
  }
  return ShuttingDownStatus();
}

grpc::Status SubmitTo(WorkerPool* pool, std::function<void()> task) {
  return FromAdmission(pool->Submit(std::move(task)));
}

}  // namespace

void DedupService::TaskSlot::Release() {
  if (released_) return;
  released_ = true;
  service_->tenants_.FinishTask(tenant_);
}

grpc::Status DedupService::Submit(const Caller& caller, uint64_t operations,
                                  std::function<void(TaskSlot&)> task) {
  return Run(caller, Admit(caller, operations), std::move(task));
}

DedupService::Admission DedupService::Admit(const Caller& caller, uint64_t operations) {
  return {tenants_.Start(caller.tenant, operations), operations};
}

grpc::Status DedupService::OverRate(const Caller& caller, const Admission& admission) {
  metrics_->CountTaskOverRate();
  const auto now = std::chrono::steady_clock::now();
  const auto ahead = std::chrono::duration_cast<std::chrono::milliseconds>(
      admission.started.not_before.value_or(now) - now);
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat("limits.max_operations_per_second_per_identity: ",
                   limits_.max_operations_per_second_per_identity, "; ", TenantName(caller),
                   " is booked ", ahead.count(),
                   " ms ahead, more than the 500 ms a call may wait; retry after that"));
}

grpc::Status DedupService::SubmitBatch(const Caller& caller,
                                       std::shared_ptr<const v1::BatchRequest> request,
                                       BatchAnswer answer) {
  const Admission start = Admit(caller, request->operations_size());
  if (start.started.start == TenantQuota::TaskStart::kOverRate) {
    // Each item is refused and the Stream goes on: refusing the batch
    // would end the whole Stream, and its client would send every batch
    // it has in flight again.
    const grpc::Status refused = OverRate(caller, start);
    v1::BatchResponse response;
    response.set_batch_id(request->batch_id());
    for (int i = 0; i < request->operations_size(); ++i) {
      v1::Error* error = response.add_results()->mutable_error();
      error->set_code(static_cast<int32_t>(refused.error_code()));
      error->set_message(refused.error_message());
    }
    answer(std::move(response), "");
    return grpc::Status::OK;
  }
  std::shared_ptr<PreparedBatch> prepared;
  if (AppendsOnReadingThread(start)) {
    prepared = std::make_shared<PreparedBatch>(PrepareBatch(*request, caller));
    if (TryApplyOnReadingThread(caller, prepared->valid, limits_.max_batch_answer_bytes,
                                [this, request, prepared, answer](Applied applied) {
                                  v1::BatchResponse response;
                                  const std::string ns = FinishBatch(*request, prepared.get(),
                                                                     std::move(applied), &response);
                                  answer(std::move(response), ns);
                                })) {
      return grpc::Status::OK;
    }
  }
  return Run(caller, start, [this, caller, request, prepared, answer](TaskSlot& slot) {
    v1::BatchResponse response;
    const std::string ns = prepared != nullptr ? ApplyPrepared(*request, prepared.get(), &response)
                                               : ExecuteBatch(*request, caller, &response);
    slot.Answer([answer, response = std::move(response), ns]() mutable {
      answer(std::move(response), ns);
    });
  });
}

bool DedupService::AppendsOnReadingThread(const Admission& admission) const {
  // The log append waits for no disk, in either durability
  // (server_settings.cc).
  return replicator_ != nullptr && execution_ == Execution::kInline &&
         admission.started.start == TenantQuota::TaskStart::kShare &&
         !admission.started.not_before && !store_->WritesStalled();
}

bool DedupService::TryApplyOnReadingThread(const Caller& caller,
                                           absl::Span<const storage::Operation> ops,
                                           size_t answer_budget_bytes,
                                           storage::Store::ApplyDone done) {
  return store_->TryApplyAsync(
      ops, answer_budget_bytes,
      [this, tenant = caller.tenant, done = std::move(done)](Applied applied) mutable {
        TaskSlot slot(this, tenant, /*yielding=*/false);
        slot.Answer([&done, &applied] { std::move(done)(std::move(applied)); });
      });
}

grpc::Status DedupService::Run(const Caller& caller, const Admission& admission,
                               std::function<void(TaskSlot&)> task) {
  const TenantQuota::TaskStart start = admission.started.start;
  const std::optional<std::chrono::steady_clock::time_point>& not_before =
      admission.started.not_before;
  if (start == TenantQuota::TaskStart::kOverRate) return OverRate(caller, admission);
  if (start == TenantQuota::TaskStart::kRefused) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(
            "limits.max_queued_tasks_per_identity: ", limits_.max_queued_tasks_per_identity,
            " calls of ", TenantName(caller), " are queued or running; retry with backoff"));
  }
  // Work beyond a tenant's share runs at the lowest CPU priority, so that
  // it takes little of the CPU that other tenants' calls want
  // (design.md §10).
  const bool yielding = start == TenantQuota::TaskStart::kBeyondShare;
  // A replicated node's calls wait for their followers: there, only the
  // calls AppendsOnReadingThread admits run without a worker.
  if (execution_ == Execution::kInline && replicator_ == nullptr && !yielding && !not_before &&
      !store_->WritesStalled()) {
    TaskSlot slot(this, caller.tenant, /*yielding=*/false);
    task(slot);
    slot.Release();
    return grpc::Status::OK;
  }
  auto run = [this, tenant = caller.tenant, yielding, task = std::move(task)] {
    TaskSlot slot(this, tenant, yielding);
    task(slot);
    slot.Release();
  };
  const WorkerPool::Lane lane = yielding ? WorkerPool::Lane::kYielding : WorkerPool::Lane::kNormal;
  // A task of a tenant ahead of its rate waits in the pool until its time.
  const grpc::Status queued =
      FromAdmission(not_before ? pool_->SubmitAt(std::move(run), lane, *not_before)
                               : pool_->Submit(std::move(run), lane));
  if (!queued.ok()) {
    tenants_.Refund(caller.tenant, admission.operations);
    tenants_.FinishTask(caller.tenant);
    return queued;
  }
  if (yielding) metrics_->CountTaskBeyondShare();
  if (not_before) metrics_->CountTaskPaced();
  return queued;
}

void DedupService::FinishAfterSync(grpc::Status status,
                                   std::function<void(const grpc::Status&)> finish) {
  if (!store_->SyncsInGroups()) {
    finish(status);
    return;
  }
  store_->AfterSync([status = std::move(status), finish = std::move(finish)](absl::Status synced) {
    finish(synced.ok() ? status : ToGrpcStatus(synced));
  });
}

grpc::Status DedupService::SubmitScan(std::function<void()> task) {
  return SubmitTo(scan_pool_, std::move(task));
}

absl::StatusOr<Caller> DedupService::Authenticate(const grpc::CallbackServerContext& context,
                                                  absl::string_view ns) {
  DenyReason why = DenyReason::kUnauthenticated;
  absl::StatusOr<Caller> caller = auth_->Authenticate(context, &why);
  if (!caller.ok()) {
    metrics_->RecordDenied(ns, why);
    return caller;
  }
  return caller;
}

absl::Status DedupService::Authorize(const Caller& caller, absl::string_view ns, Role role) {
  absl::Status allowed = auth_->Authorize(caller, ns, role);
  if (!allowed.ok()) metrics_->RecordDenied(ns, DenyReason::kNoGrant);
  return allowed;
}

grpc::ServerUnaryReactor* DedupService::Topology(grpc::CallbackServerContext* context,
                                                 const v1::TopologyRequest* /*request*/,
                                                 v1::TopologyResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Caller> caller = Authenticate(*context, "");
  absl::Status allowed = caller.ok() ? auth_->AuthorizeAny(*caller) : caller.status();
  if (!allowed.ok()) {
    if (caller.ok()) metrics_->RecordDenied("", DenyReason::kNoGrant);
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  response->set_shard_count(shards_->shard_count());
  for (const std::string& node : shards_->nodes()) response->add_nodes(node);
  response->set_node_index(shards_->self());
  response->set_version(shards_->version());
  if (replicator_ != nullptr) replicator_->FillTopology(response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

namespace {

// The placement calls change the whole cluster: they need "cluster" on "*".
// etcd is called on a pool thread, not on gRPC's.
template <typename Body>
grpc::ServerUnaryReactor* RunPlacementCall(grpc::CallbackServerContext* context, Authorizer* auth,
                                           Metrics* metrics, WorkerPool* pool,
                                           cluster::Replicator* replicator, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Caller> caller = auth->Authenticate(*context);
  absl::Status allowed =
      caller.ok() ? auth->Authorize(*caller, "*", Role::kCluster) : caller.status();
  if (!allowed.ok()) {
    if (caller.ok()) metrics->RecordDenied("", DenyReason::kNoGrant);
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  if (replicator == nullptr) {
    reactor->Finish(ToGrpcStatus(absl::FailedPreconditionError(
        "this node is not part of a replicated cluster (replication_factor 1): its shards are "
        "placed by the static rule and cannot move")));
    return reactor;
  }
  const grpc::Status queued = SubmitTo(
      pool, [reactor, replicator, body] { reactor->Finish(ToGrpcStatus(body(replicator))); });
  if (!queued.ok()) reactor->Finish(queued);
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* DedupService::MoveShard(grpc::CallbackServerContext* context,
                                                  const v1::MoveShardRequest* request,
                                                  v1::MoveShardResponse* /*response*/) {
  const v1::MoveShardRequest copy = *request;
  return RunPlacementCall(context, auth_, metrics_, scan_pool_, replicator_,
                          [copy](cluster::Replicator* replicator) {
                            return replicator->MoveShard(copy.shard(), copy.from(), copy.to());
                          });
}

grpc::ServerUnaryReactor* DedupService::SetDraining(grpc::CallbackServerContext* context,
                                                    const v1::SetDrainingRequest* request,
                                                    v1::SetDrainingResponse* /*response*/) {
  const v1::SetDrainingRequest copy = *request;
  return RunPlacementCall(context, auth_, metrics_, scan_pool_, replicator_,
                          [copy](cluster::Replicator* replicator) {
                            return replicator->SetDraining(copy.node(), copy.draining());
                          });
}

void DedupService::RecordRequest(Method method, absl::string_view ns, RequestStart start,
                                 const grpc::Status& status) {
  metrics_->RecordRequest(method, ns, absl::FromChrono(NowForLatency() - start),
                          status.error_code());
  metrics_->RequestFinished();
}

void DedupService::NoteResult(const storage::Operation& op,
                              const absl::StatusOr<storage::OpResult>& answer) {
  if (!answer.ok()) return;
  const storage::OpResult& result = *answer;
  // Answered as a stale token, counted as the denial it is.
  if (result.foreign_token)
    metrics_->RecordDenied(storage::OpNamespace(op), DenyReason::kNotHolder);
  metrics_->RecordOperation(op, result);
  if (!result.takeover && !result.poisoned) return;
  const storage::Record& record = result.record;
  std::vector<LogField> fields = KeyFields(record.ns, record.key);
  fields.emplace_back("shard", storage::ShardOf(record.ns, record.key, store_->shard_count()));
  fields.emplace_back("attempts", record.attempts);
  if (result.takeover) {
    fields.emplace_back("owner", record.owner);
    LogEvent(spdlog::level::info, "lease takeover", fields);
  }
  if (result.poisoned) LogEvent(spdlog::level::warn, "key poisoned (FAILED)", fields);
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* DedupService::Unary(grpc::CallbackServerContext* context,
                                              const Request* request, Response* response,
                                              Method method,
                                              void (*fill)(const storage::OpResult&, Response*)) {
  const RequestStart start = NowForLatency();
  metrics_->RequestStarted();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [this, reactor, method, start, request](const grpc::Status& status) {
    RecordRequest(method, request->namespace_(), start, status);
    reactor->Finish(status);
  };
  absl::StatusOr<Caller> caller = Authenticate(*context, request->namespace_());
  const Role role = method == Method::kQuery ? Role::kRead : Role::kClaim;
  absl::Status allowed =
      caller.ok() ? Authorize(*caller, request->namespace_(), role) : caller.status();
  if (!allowed.ok()) {
    finish(ToGrpcStatus(allowed));
    return reactor;
  }
  absl::StatusOr<storage::Operation> op = translator_.Translate(*request);
  if (!op.ok()) {
    finish(ToGrpcStatus(op.status()));
    return reactor;
  }
  storage::SetIdentity(&*op, caller->identity);
  auto shared_op = std::make_shared<const storage::Operation>(std::move(*op));
  auto answered = [this, shared_op, response, fill,
                   finish](absl::StatusOr<storage::OpResult> result) {
    NoteResult(*shared_op, result);
    if (result.ok()) fill(*result, response);
    FinishAfterSync(ToGrpcStatus(result.status()), finish);
  };
  const Admission started = Admit(*caller, 1);
  if (AppendsOnReadingThread(started) &&
      TryApplyOnReadingThread(
          *caller, absl::MakeConstSpan(shared_op.get(), 1), std::numeric_limits<size_t>::max(),
          [answered](Applied applied) { answered(std::move(applied.front())); })) {
    return reactor;
  }
  const grpc::Status queued =
      Run(*caller, started, [this, context, shared_op, finish, answered](TaskSlot& slot) {
        if (grpc::Status abandoned = AbandonedStatus(context); !abandoned.ok()) {
          // Nobody waits for the answer: storage is spared.
          slot.Answer([finish, abandoned] { finish(abandoned); });
          return;
        }
        absl::StatusOr<storage::OpResult> result = store_->Apply(*shared_op);
        slot.Answer(
            [answered, result = std::move(result)]() mutable { answered(std::move(result)); });
      });
  if (!queued.ok()) finish(queued);
  return reactor;
}

grpc::ServerUnaryReactor* DedupService::Claim(grpc::CallbackServerContext* context,
                                              const v1::ClaimRequest* request,
                                              v1::ClaimResponse* response) {
  return Unary(context, request, response, Method::kClaim, &FillClaim);
}

grpc::ServerUnaryReactor* DedupService::Complete(grpc::CallbackServerContext* context,
                                                 const v1::CompleteRequest* request,
                                                 v1::CompleteResponse* response) {
  return Unary(context, request, response, Method::kComplete, &FillComplete);
}

grpc::ServerUnaryReactor* DedupService::Release(grpc::CallbackServerContext* context,
                                                const v1::ReleaseRequest* request,
                                                v1::ReleaseResponse* response) {
  return Unary(context, request, response, Method::kRelease, &FillRelease);
}

grpc::ServerUnaryReactor* DedupService::Extend(grpc::CallbackServerContext* context,
                                               const v1::ExtendRequest* request,
                                               v1::ExtendResponse* response) {
  return Unary(context, request, response, Method::kExtend, &FillExtend);
}

grpc::ServerUnaryReactor* DedupService::Query(grpc::CallbackServerContext* context,
                                              const v1::QueryRequest* request,
                                              v1::QueryResponse* response) {
  return Unary(context, request, response, Method::kQuery, &FillQuery);
}

grpc::ServerUnaryReactor* DedupService::Batch(grpc::CallbackServerContext* context,
                                              const v1::BatchRequest* request,
                                              v1::BatchResponse* response) {
  const RequestStart start = NowForLatency();
  metrics_->RequestStarted();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [this, reactor, start](absl::string_view ns, const grpc::Status& status) {
    RecordRequest(Method::kBatch, ns, start, status);
    reactor->Finish(status);
  };
  absl::StatusOr<Caller> caller = Authenticate(*context, "");
  absl::Status admitted = caller.ok() ? auth_->AuthorizeAny(*caller) : caller.status();
  if (caller.ok() && !admitted.ok()) metrics_->RecordDenied("", DenyReason::kNoGrant);
  if (admitted.ok()) admitted = CheckBatchSize(*request);
  if (!admitted.ok()) {
    finish("", ToGrpcStatus(admitted));
    return reactor;
  }
  // gRPC frees the answer once it is sent.
  auto answered = [this, response, finish](const std::string& ns) {
    if (memory_release_ != nullptr) {
      if (const uint64_t bytes = response->ByteSizeLong(); bytes >= kLargeAnswerBytes) {
        memory_release_->Freed(bytes);
      }
    }
    FinishAfterSync(grpc::Status::OK,
                    [finish, ns](const grpc::Status& status) { finish(ns, status); });
  };
  const Admission started = Admit(*caller, request->operations_size());
  std::shared_ptr<PreparedBatch> prepared;
  if (AppendsOnReadingThread(started)) {
    prepared = std::make_shared<PreparedBatch>(PrepareBatch(*request, *caller));
    if (TryApplyOnReadingThread(*caller, prepared->valid, limits_.max_batch_answer_bytes,
                                [this, request, response, prepared, answered](Applied applied) {
                                  answered(FinishBatch(*request, prepared.get(), std::move(applied),
                                                       response));
                                })) {
      return reactor;
    }
  }
  const grpc::Status queued =
      Run(*caller, started,
          [this, context, request, response, prepared, answered, finish,
           caller = *caller](TaskSlot& slot) {
            if (grpc::Status abandoned = AbandonedStatus(context); !abandoned.ok()) {
              slot.Answer([finish, abandoned] { finish("", abandoned); });
              return;
            }
            // Authorized and translated already when it was prepared: not
            // again, so that no refusal is counted twice.
            const std::string ns = prepared != nullptr
                                       ? ApplyPrepared(*request, prepared.get(), response)
                                       : ExecuteBatch(*request, caller, response);
            slot.Answer([answered, ns] { answered(ns); });
          });
  if (!queued.ok()) finish("", queued);
  return reactor;
}

std::string DedupService::ExecuteBatch(const v1::BatchRequest& request, const Caller& caller,
                                       v1::BatchResponse* response) {
  PreparedBatch prepared = PrepareBatch(request, caller);
  return ApplyPrepared(request, &prepared, response);
}

std::string DedupService::ApplyPrepared(const v1::BatchRequest& request, PreparedBatch* prepared,
                                        v1::BatchResponse* response) {
  std::vector<absl::StatusOr<storage::OpResult>> applied;
  if (!prepared->valid.empty()) {
    applied = store_->Apply(prepared->valid, limits_.max_batch_answer_bytes);
  }
  return FinishBatch(request, prepared, std::move(applied), response);
}

DedupService::PreparedBatch DedupService::PrepareBatch(const v1::BatchRequest& request,
                                                       const Caller& caller) {
  const int n = request.operations_size();
  PreparedBatch prepared;
  prepared.results.assign(n, absl::InternalError("not executed"));
  prepared.valid.reserve(n);
  prepared.positions.reserve(n);
  for (int i = 0; i < n; ++i) {
    const v1::Operation& item = request.operations(i);
    absl::Status allowed =
        item.op_case() == v1::Operation::OP_NOT_SET
            ? absl::OkStatus()  // Translate answers INVALID_ARGUMENT.
            : Authorize(caller, OperationNamespace(item),
                        item.op_case() == v1::Operation::kQuery ? Role::kRead : Role::kClaim);
    if (!allowed.ok()) {
      prepared.results[i] = allowed;
      continue;
    }
    absl::StatusOr<storage::Operation> op = translator_.Translate(request.operations(i));
    if (op.ok()) {
      storage::SetIdentity(&*op, caller.identity);
      prepared.valid.push_back(std::move(*op));
      prepared.positions.push_back(i);
    } else {
      prepared.results[i] = op.status();
    }
  }
  return prepared;
}

std::string DedupService::FinishBatch(const v1::BatchRequest& request, PreparedBatch* prepared,
                                      std::vector<absl::StatusOr<storage::OpResult>> applied,
                                      v1::BatchResponse* response) {
  const int n = request.operations_size();
  response->set_batch_id(request.batch_id());
  for (size_t j = 0; j < applied.size(); ++j) {
    NoteResult(prepared->valid[j], applied[j]);
    prepared->results[prepared->positions[j]] = std::move(applied[j]);
  }
  for (int i = 0; i < n; ++i) {
    FillOperationResult(request.operations(i), prepared->results[i], response->add_results());
  }
  std::string ns;
  for (const storage::Operation& op : prepared->valid) {
    if (ns.empty()) ns = storage::OpNamespace(op);
    if (storage::OpNamespace(op) != ns) return "";
  }
  return ns;
}

absl::Status DedupService::TryOpenStream(const Caller& caller) {
  uint32_t open = open_streams_.load(std::memory_order_relaxed);
  do {
    if (open >= limits_.max_open_streams) {
      return absl::ResourceExhaustedError(
          absl::StrCat("limits.max_open_streams: ", limits_.max_open_streams,
                       " Stream calls are open on this server"));
    }
  } while (!open_streams_.compare_exchange_weak(open, open + 1, std::memory_order_relaxed));
  if (!tenants_.TryOpenStream(caller.tenant)) {
    open_streams_.fetch_sub(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        "limits.max_open_streams_per_identity: ", limits_.max_open_streams_per_identity,
        " Stream calls of ", TenantName(caller), " are open"));
  }
  return absl::OkStatus();
}

void DedupService::StreamClosed(const Caller& caller) {
  tenants_.CloseStream(caller.tenant);
  open_streams_.fetch_sub(1, std::memory_order_relaxed);
}

DedupService::~DedupService() {
  // gRPC's Server::Wait returns only after the last reactor's OnDone has
  // returned, but through synchronization of gRPC's own, which
  // ThreadSanitizer does not see: taking the mutex the last RemoveStream
  // released shows it that order.
  absl::MutexLock lock(&streams_mu_);
}

bool DedupService::AddStream(StreamReactor* stream) {
  absl::MutexLock lock(&streams_mu_);
  if (streams_closed_) return false;
  streams_.insert(stream);
  return true;
}

void DedupService::RemoveStream(StreamReactor* stream) {
  absl::MutexLock lock(&streams_mu_);
  streams_.erase(stream);
}

void DedupService::CloseStreams() {
  const grpc::Status closing(grpc::StatusCode::UNAVAILABLE, kStreamClosedByShutdown);
  std::vector<std::pair<StreamReactor*, grpc::Status>> finish_now;
  {
    absl::MutexLock lock(&streams_mu_);
    streams_closed_ = true;
    for (StreamReactor* stream : streams_) {
      if (std::optional<grpc::Status> status = stream->Close(closing); status.has_value()) {
        finish_now.emplace_back(stream, *std::move(status));
      }
    }
  }
  // gRPC deletes none of these before its Finish.
  for (auto& [stream, status] : finish_now) stream->Finish(std::move(status));
}

grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* DedupService::Stream(
    grpc::CallbackServerContext* context) {
  absl::StatusOr<Caller> caller = Authenticate(*context, "");
  if (!caller.ok()) return new StreamReactor(this, caller.status(), /*counted=*/false);
  // An identity without any grant could do nothing with a Stream but hold
  // one of the server's slots.
  if (absl::Status any = auth_->AuthorizeAny(*caller); !any.ok()) {
    metrics_->RecordDenied("", DenyReason::kNoGrant);
    return new StreamReactor(this, any, /*counted=*/false);
  }
  if (absl::Status opened = TryOpenStream(*caller); !opened.ok()) {
    return new StreamReactor(this, opened, /*counted=*/false);
  }
  return new StreamReactor(this, *std::move(caller), /*counted=*/true);
}

grpc::ServerWriteReactor<v1::Record>* DedupService::Scan(grpc::CallbackServerContext* context,
                                                         const v1::ScanRequest* request) {
  absl::StatusOr<Caller> caller = Authenticate(*context, request->namespace_());
  absl::Status allowed =
      caller.ok() ? Authorize(*caller, request->namespace_(), Role::kScan) : caller.status();
  return new ScanReactor(this, *request, ToGrpcStatus(allowed));
}

}  // namespace dedup::server
