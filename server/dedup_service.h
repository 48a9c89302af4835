#ifndef DEDUP_SERVER_DEDUP_SERVICE_H_
#define DEDUP_SERVER_DEDUP_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "server/authorization.h"
#include "server/cluster/replicator.h"
#include "server/limits.h"
#include "server/memory_release.h"
#include "server/metrics.h"
#include "server/request_translator.h"
#include "server/server_settings.h"
#include "server/shard_map.h"
#include "server/tenant_quota.h"
#include "server/worker_pool.h"
#include "storage/store.h"

namespace dedup::server {

// Most operations in one Batch (or one Stream message).
inline constexpr int kMaxBatchOperations = 1000;

// INVALID_ARGUMENT when `request` holds more than kMaxBatchOperations.
absl::Status CheckBatchSize(const v1::BatchRequest& request);

class StreamReactor;

// The dedup.v1.Dedup service on gRPC's callback API. Handlers validate on
// the gRPC thread, then run storage work and finish either on the worker
// pool (Execution::kWorkers), so that no gRPC thread waits on a disk sync
// or a follower, or on the same gRPC thread (Execution::kInline, buffered
// single-node storage, where a call waits for neither), saving the
// hand-off. Inline calls still go to the pool while RocksDB reports a write
// stall.
class DedupService final : public v1::Dedup::CallbackService {
 public:
  // `store`, `pool`, `scan_pool`, `metrics` and `auth` must outlive the
  // service.
  DedupService(storage::Store* store, WorkerPool* pool, WorkerPool* scan_pool, Metrics* metrics,
               Authorizer* auth, std::shared_ptr<const ShardMap> shards,
               RequestTranslator translator, const ServerLimits& limits, Execution execution);
  // Destroy only after the gRPC server's Wait: every Stream has then ended
  // and been removed (RemoveStream, from its reactor's OnDone).
  ~DedupService() override;

  // Makes Topology name each shard's leader (a replicated cluster). Call
  // before serving; `replicator` must outlive the service.
  void SetReplicator(cluster::Replicator* replicator) { replicator_ = replicator; }
  // Where Streams and Batches note the large answers they free (see
  // memory_release.h). Call before serving; `release` must outlive the
  // service.
  void SetMemoryRelease(MemoryRelease* release) { memory_release_ = release; }
  MemoryRelease* memory_release() const { return memory_release_; }

  grpc::ServerUnaryReactor* Claim(grpc::CallbackServerContext* context,
                                  const v1::ClaimRequest* request,
                                  v1::ClaimResponse* response) override;
  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* context,
                                     const v1::CompleteRequest* request,
                                     v1::CompleteResponse* response) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* context,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* Extend(grpc::CallbackServerContext* context,
                                   const v1::ExtendRequest* request,
                                   v1::ExtendResponse* response) override;
  grpc::ServerUnaryReactor* Query(grpc::CallbackServerContext* context,
                                  const v1::QueryRequest* request,
                                  v1::QueryResponse* response) override;
  grpc::ServerUnaryReactor* Batch(grpc::CallbackServerContext* context,
                                  const v1::BatchRequest* request,
                                  v1::BatchResponse* response) override;
  grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* Stream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<v1::Record>* Scan(grpc::CallbackServerContext* context,
                                             const v1::ScanRequest* request) override;
  grpc::ServerUnaryReactor* Topology(grpc::CallbackServerContext* context,
                                     const v1::TopologyRequest* request,
                                     v1::TopologyResponse* response) override;
  grpc::ServerUnaryReactor* MoveShard(grpc::CallbackServerContext* context,
                                      const v1::MoveShardRequest* request,
                                      v1::MoveShardResponse* response) override;
  grpc::ServerUnaryReactor* SetDraining(grpc::CallbackServerContext* context,
                                        const v1::SetDrainingRequest* request,
                                        v1::SetDrainingResponse* response) override;

  // Runs one batch for `caller`: each item authorized, validated and
  // answered on its own, the valid ones applied to storage together, reads
  // past max_batch_answer_bytes answered RESOURCE_EXHAUSTED. Blocks on
  // storage; call it from a worker. Returns the namespace every valid item
  // names, or empty when they name several (or none is valid), for the
  // latency label.
  std::string ExecuteBatch(const v1::BatchRequest& request, const Caller& caller,
                           v1::BatchResponse* response);

  // Runs a Stream batch of `caller` as ExecuteBatch does and calls
  // `answer` with its response and latency label, on a thread that may
  // call into gRPC, once the tenant's slot is given back. Where
  // AppendsOnReadingThread admits it, it is decided and appended on this
  // thread and answered by the replication thread that sees its commit;
  // otherwise as Submit. On refusal, the status to answer, and `answer`
  // is never called.
  using BatchAnswer = std::function<void(v1::BatchResponse, std::string)>;
  grpc::Status SubmitBatch(const Caller& caller, std::shared_ptr<const v1::BatchRequest> request,
                           BatchAnswer answer);

  // The caller of `context`, or the status refusing the call; counts a
  // refusal under `ns`.
  absl::StatusOr<Caller> Authenticate(const grpc::CallbackServerContext& context,
                                      absl::string_view ns);
  // Authorizes `caller` for `role` on `ns`, counting a refusal.
  absl::Status Authorize(const Caller& caller, absl::string_view ns, Role role);

  // Counts a finished RPC (latency from `start`, read from the steady
  // clock so that wall-clock steps do not distort it) and ends its
  // in-flight count, which the handler began with metrics()->RequestStarted().
  // `ns` as Metrics::RecordRequest takes it.
  void RecordRequest(Method method, absl::string_view ns, RequestStart start,
                     const grpc::Status& status);

  // What a storage task holds while it runs: one of its tenant's
  // limits.max_queued_tasks_per_identity, and the lane it runs in.
  class TaskSlot {
   public:
    TaskSlot(const TaskSlot&) = delete;
    TaskSlot& operator=(const TaskSlot&) = delete;

    // Gives the tenant's slot back, so that the caller's next call does
    // not find this one still counted, then runs `answer`, which calls into
    // gRPC: here, or from the yielding lane on a normal thread
    // (WorkerPool::Post). At most once per task; a task that returns
    // without answering gives its slot back then. A template, so that the
    // common case, answering here, wraps nothing in a std::function.
    template <typename F>
    void Answer(F&& answer) {
      Release();
      if (yielding_) {
        service_->pool_->Post(std::function<void()>(std::forward<F>(answer)));
      } else {
        std::forward<F>(answer)();
      }
    }

   private:
    friend class DedupService;
    TaskSlot(DedupService* service, std::string tenant, bool yielding)
        : service_(service), tenant_(std::move(tenant)), yielding_(yielding) {}
    void Release();

    DedupService* const service_;
    const std::string tenant_;
    const bool yielding_;
    bool released_ = false;
  };

  // Runs `task` now on this thread (inline execution while storage accepts
  // writes at full speed) or queues it on the worker pool; on refusal, the
  // status to answer. `caller`'s tenant holds one of its
  // limits.max_queued_tasks_per_identity until the task answers through
  // its slot or returns. A task beyond the tenant's share (tenant_quota.h)
  // is queued in the pool's yielding lane, in inline execution too.
  // `operations`: how many the task carries (a Batch's), which weighs the
  // tenant's share.
  grpc::Status Submit(const Caller& caller, uint64_t operations,
                      std::function<void(TaskSlot&)> task);
  // Queues `task` on Scan's own pool.
  grpc::Status SubmitScan(std::function<void()> task);
  // Calls `finish` with `status` once the store has synced everything the
  // call's storage work wrote or read (storage::Store::AfterSync): at once
  // unless the store syncs in groups, else from its sync thread. A failed
  // sync replaces `status` with UNAVAILABLE.
  void FinishAfterSync(grpc::Status status, std::function<void(const grpc::Status&)> finish);

  // Counts a Stream call of `caller` in, or returns RESOURCE_EXHAUSTED when
  // limits().max_open_streams are open, or max_open_streams_per_identity
  // of its tenant; StreamClosed counts one out.
  absl::Status TryOpenStream(const Caller& caller);
  void StreamClosed(const Caller& caller);

  // The Streams open now, so that a server shutting down can end them:
  // AddStream returns false once CloseStreams has run (the Stream must
  // then end at once); RemoveStream comes from the reactor's OnDone.
  bool AddStream(StreamReactor* stream);
  void RemoveStream(StreamReactor* stream);
  // Ends every open Stream with UNAVAILABLE once the batches it has read
  // are answered and written, reading no more, and ends every Stream
  // opened later at once. A client holds its Stream open for as long as it
  // likes, so without this a shutdown would wait out its whole grace and
  // then cancel them; the client library retries what such a Stream
  // leaves unanswered (on another node, in a cluster).
  void CloseStreams();

  WorkerPool* pool() const { return pool_; }
  const TenantQuota& tenants() const { return tenants_; }
  const ServerLimits& limits() const { return limits_; }
  Metrics* metrics() const { return metrics_; }
  Authorizer* auth() const { return auth_; }
  storage::Store* store() const { return store_; }
  const RequestTranslator& translator() const { return translator_; }

 private:
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const Request* request,
                                  Response* response, Method method,
                                  void (*fill)(const storage::OpResult&, Response*));
  // ExecuteBatch's steps: each item authorized and translated; then the
  // answers of the valid ones applied, all of them filled in, and the
  // latency label returned.
  struct PreparedBatch {
    std::vector<absl::StatusOr<storage::OpResult>> results;
    std::vector<storage::Operation> valid;
    std::vector<int> positions;  // Of `valid` in the request.
  };
  PreparedBatch PrepareBatch(const v1::BatchRequest& request, const Caller& caller);
  // Applies a prepared batch (where a thread may wait) and finishes it.
  std::string ApplyPrepared(const v1::BatchRequest& request, PreparedBatch* prepared,
                            v1::BatchResponse* response);
  std::string FinishBatch(const v1::BatchRequest& request, PreparedBatch* prepared,
                          std::vector<absl::StatusOr<storage::OpResult>> applied,
                          v1::BatchResponse* response);
  // How a storage task of `operations` was admitted for its tenant
  // (TenantQuota::Start): refused past the tenant's tasks or rate, or in
  // which lane and, for a tenant ahead of its rate, from when it may run.
  struct Admission {
    TenantQuota::Started started;
    uint64_t operations;
  };
  Admission Admit(const Caller& caller, uint64_t operations);
  // The refusal of a call admitted kOverRate, counted.
  grpc::Status OverRate(const Caller& caller, const Admission& admission);
  // Submit, for a task admitted as `admission`.
  grpc::Status Run(const Caller& caller, const Admission& admission,
                   std::function<void(TaskSlot&)> task);
  // Whether a call admitted as `admission` is decided and appended on the
  // gRPC thread that read it, and answered by the replication thread that
  // sees its commit, so that no thread waits for the followers: on a
  // replicated node in inline execution, within the tenant's share and
  // rate, while RocksDB does not stall writes. Otherwise it goes to Run.
  bool AppendsOnReadingThread(const Admission& admission) const;
  // Store::TryApplyAsync for such a call: `done` gets the answers of
  // `ops` once the tenant's slot is given back, on a thread that may call
  // into gRPC. Returns false, having done nothing, when another call holds
  // one of its keys (it may be waiting for its own commit): the call then
  // goes to a worker (Run, with the same start), where it may wait.
  using Applied = std::vector<absl::StatusOr<storage::OpResult>>;
  bool TryApplyOnReadingThread(const Caller& caller, absl::Span<const storage::Operation> ops,
                               size_t answer_budget_bytes, storage::Store::ApplyDone done);

  // Metrics and notable-event logs of one storage answer (or refusal).
  void NoteResult(const storage::Operation& op, const absl::StatusOr<storage::OpResult>& result);

  storage::Store* const store_;
  WorkerPool* const pool_;
  WorkerPool* const scan_pool_;
  Metrics* const metrics_;
  Authorizer* const auth_;
  const std::shared_ptr<const ShardMap> shards_;
  // Set in a replicated cluster: who leads which shard.
  cluster::Replicator* replicator_ = nullptr;
  MemoryRelease* memory_release_ = nullptr;
  const RequestTranslator translator_;
  const ServerLimits limits_;
  const Execution execution_;
  std::atomic<uint32_t> open_streams_{0};
  TenantQuota tenants_;
  absl::Mutex streams_mu_;  // Before any StreamReactor's own.
  absl::flat_hash_set<StreamReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool streams_closed_ ABSL_GUARDED_BY(streams_mu_) = false;
};

// Why a call that waited for a worker must not reach storage: CANCELLED or
// DEADLINE_EXCEEDED once the client gave up, OK while it still waits.
grpc::Status AbandonedStatus(grpc::CallbackServerContext* context);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_DEDUP_SERVICE_H_
