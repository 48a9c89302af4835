#ifndef DEDUP_SERVER_METRICS_H_
#define DEDUP_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/status_code_enum.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/authorization.h"
#include "server/connection_gate.h"
#include "server/proto_mapping.h"
#include "server/status_convert.h"
#include "storage/operation.h"
#include "storage/store_stats.h"

namespace dedup::server {

// When an RPC was received, for its latency: steady time, so that a step of
// the wall clock does not distort the histogram.
using RequestStart = std::chrono::steady_clock::time_point;
inline RequestStart NowForLatency() { return std::chrono::steady_clock::now(); }

// The RPCs, as the `method` label of request metrics.
enum class Method { kClaim, kComplete, kRelease, kExtend, kQuery, kBatch, kStream, kScan };
inline constexpr int kMethodCount = 8;
const char* MethodName(Method method);

// The Prometheus metrics of design.md §9, all prefixed dedup_. Counters by
// namespace keep the label set bounded: declared namespaces and the first
// `max_namespace_labels` others seen get their own label, later ones are
// counted under namespace="other".
//
// Thread-safe; the hot path takes no exclusive lock once a namespace has
// been seen.
class Metrics {
 public:
  Metrics(const std::vector<std::string>& declared, size_t max_namespace_labels,
          const std::string& version);

  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Counts the answer to one storage operation.
  void RecordOperation(const storage::Operation& op, const storage::OpResult& result);

  // One call or item refused by authorization. `ns` is labelled as the
  // request metrics label it when it already has a label, and "other"
  // otherwise: refused callers never make labels.
  void RecordDenied(absl::string_view ns, DenyReason reason);

  // One finished RPC (a Batch or Stream message counts once, its items in
  // RecordOperation), with its gRPC status code. `ns` labels the latency:
  // the request's namespace, or empty for a Batch or Stream message that
  // spans several (namespace="mixed"). A request refused for its input or
  // its namespace (INVALID_ARGUMENT, NOT_FOUND) or by authorization
  // (UNAUTHENTICATED, PERMISSION_DENIED) is labelled "other", so
  // that junk namespaces never take a label.
  void RecordRequest(Method method, absl::string_view ns, absl::Duration latency,
                     grpc::StatusCode code);
  void RequestStarted() { in_flight_->Increment(); }
  void RequestFinished() { in_flight_->Decrement(); }

  // Gauges and compaction counters from a fresh reading of the store.
  void RecordStorage(const storage::StoreStats& stats);

  // dedup_connections_refused_total: one connection closed as soon as it
  // was accepted (connection_gate.h).
  void RecordConnectionRefused(ConnectionRefusal reason);
  // dedup_tasks_beyond_share_total: one task of a tenant queued to run at
  // the lowest CPU priority, beyond its share (tenant_quota.h).
  void CountTaskBeyondShare() { tasks_beyond_share_->Increment(); }
  // dedup_tasks_paced_total: one task of a tenant ahead of its rate queued
  // to wait for its time; dedup_tasks_over_rate_total: one refused, its
  // tenant booked too far ahead (tenant_quota.h).
  void CountTaskPaced() { tasks_paced_->Increment(); }
  void CountTaskOverRate() { tasks_over_rate_->Increment(); }
  // dedup_tls_handshake_failures_total, from the process's running total
  // (grpc_log.h).
  void RecordTlsHandshakeFailures(uint64_t total);
  // dedup_connections_open.
  void SetOpenConnections(size_t open) { connections_open_->Set(static_cast<double>(open)); }

  // dedup_ready: 1 when /readyz would answer 200.
  void SetReady(bool ready) { ready_->Set(ready ? 1 : 0); }

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  // Every series of one namespace label, created once.
  struct NamespaceSeries {
    // By OutcomeKind, then by OutcomeIndex (proto_mapping.h).
    std::array<std::vector<prometheus::Counter*>, kOutcomeKindCount> outcomes;
    prometheus::Counter* duplicates_completed;
    prometheus::Counter* duplicates_in_progress;
    prometheus::Counter* takeovers;
    prometheus::Counter* stale_tokens;
    prometheus::Counter* mismatches;
    prometheus::Counter* poisoned;
    std::array<prometheus::Histogram*, kMethodCount> latency;  // By Method.
  };
  NamespaceSeries* SeriesFor(absl::string_view ns);
  NamespaceSeries* CreateSeries(const std::string& label) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_namespace_labels_;
  const std::shared_ptr<prometheus::Registry> registry_;

  // dedup_claims_total, dedup_completes_total, ... by OutcomeKind.
  std::array<prometheus::Family<prometheus::Counter>*, kOutcomeKindCount> outcome_families_;
  prometheus::Family<prometheus::Counter>& duplicates_;
  prometheus::Family<prometheus::Counter>& takeovers_;
  prometheus::Family<prometheus::Counter>& stale_tokens_;
  prometheus::Family<prometheus::Counter>& mismatches_;
  prometheus::Family<prometheus::Counter>& poisoned_;
  prometheus::Family<prometheus::Counter>& denied_;
  prometheus::Family<prometheus::Counter>& requests_;
  std::array<std::array<std::atomic<prometheus::Counter*>, kGrpcCodeCount>, kMethodCount>
      requests_by_code_{};
  prometheus::Family<prometheus::Histogram>& latency_family_;
  // Batch and Stream messages whose items span namespaces; null for the
  // other methods.
  std::array<prometheus::Histogram*, kMethodCount> mixed_latency_{};
  prometheus::Gauge* in_flight_;
  prometheus::Family<prometheus::Counter>& compaction_drops_;
  std::array<prometheus::Counter*, 3> dropped_;  // completed, failed, abandoned
  std::array<uint64_t, 3> dropped_seen_ ABSL_GUARDED_BY(storage_mu_) = {0, 0, 0};
  prometheus::Family<prometheus::Gauge>& records_;
  prometheus::Gauge* storage_bytes_;
  prometheus::Gauge* pending_compaction_bytes_;
  prometheus::Gauge* write_stalled_;
  prometheus::Counter* write_stall_seconds_;
  uint64_t write_stall_micros_seen_ ABSL_GUARDED_BY(storage_mu_) = 0;
  prometheus::Gauge* volume_free_bytes_;
  prometheus::Gauge* volume_total_bytes_;
  prometheus::Gauge* ready_;
  prometheus::Gauge* background_errors_;
  prometheus::Counter* clock_forward_steps_;
  prometheus::Counter* clock_backward_steps_;
  uint64_t clock_forward_seen_ ABSL_GUARDED_BY(storage_mu_) = 0;
  uint64_t clock_backward_seen_ ABSL_GUARDED_BY(storage_mu_) = 0;
  prometheus::Counter* corrupt_records_;
  std::array<prometheus::Counter*, 3> connections_refused_;  // By ConnectionRefusal.
  prometheus::Gauge* connections_open_;
  prometheus::Counter* tasks_beyond_share_;
  prometheus::Counter* tasks_paced_;
  prometheus::Counter* tasks_over_rate_;
  prometheus::Counter* tls_handshake_failures_;
  uint64_t tls_handshake_failures_seen_ ABSL_GUARDED_BY(storage_mu_) = 0;
  uint64_t corrupt_records_seen_ ABSL_GUARDED_BY(storage_mu_) = 0;
  absl::Mutex storage_mu_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<NamespaceSeries>> series_ ABSL_GUARDED_BY(mu_);
  size_t undeclared_labels_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_METRICS_H_
