#ifndef DEDUP_SERVER_METRICS_H_
#define DEDUP_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "storage/operation.h"
#include "storage/store.h"

namespace dedup::server {

// The RPCs, as the `method` label of request metrics.
enum class Method { kClaim, kComplete, kRelease, kExtend, kQuery, kBatch, kStream, kScan };
inline constexpr int kMethodCount = 8;
const char* MethodName(Method method);

// The Prometheus metrics of DESIGN §9, all prefixed dedup_. Counters by
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

  // One finished RPC (a Batch or Stream message counts once, its items in
  // RecordOperation), with its gRPC status code and the code's name.
  void RecordRequest(Method method, absl::Duration latency, int code, const char* code_name);
  void RequestStarted() { in_flight_->Increment(); }
  void RequestFinished() { in_flight_->Decrement(); }

  // Gauges and compaction counters from a fresh reading of the store.
  void RecordStorage(const storage::StoreStats& stats);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  // Every series of one namespace label, created once.
  struct NamespaceSeries {
    std::array<prometheus::Counter*, 5> claims;  // By Claim outcome.
    prometheus::Counter* duplicates_completed;
    prometheus::Counter* duplicates_in_progress;
    prometheus::Counter* takeovers;
    std::array<prometheus::Counter*, 4> completes;  // ok, already_completed, stale_token, not_found
    std::array<prometheus::Counter*, 4> releases;   // ok, failed, stale_token, not_found
    std::array<prometheus::Counter*, 3> extends;    // ok, stale_token, not_found
    prometheus::Counter* stale_tokens;
    prometheus::Counter* mismatches;
    prometheus::Counter* poisoned;
  };
  NamespaceSeries* SeriesFor(const std::string& ns);
  NamespaceSeries* CreateSeries(const std::string& label) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_namespace_labels_;
  const std::shared_ptr<prometheus::Registry> registry_;

  prometheus::Family<prometheus::Counter>& claims_;
  prometheus::Family<prometheus::Counter>& duplicates_;
  prometheus::Family<prometheus::Counter>& takeovers_;
  prometheus::Family<prometheus::Counter>& completes_;
  prometheus::Family<prometheus::Counter>& releases_;
  prometheus::Family<prometheus::Counter>& extends_;
  prometheus::Family<prometheus::Counter>& stale_tokens_;
  prometheus::Family<prometheus::Counter>& mismatches_;
  prometheus::Family<prometheus::Counter>& poisoned_;
  prometheus::Family<prometheus::Counter>& requests_;
  static constexpr int kCodeCount = 17;
  std::array<std::array<std::atomic<prometheus::Counter*>, kCodeCount>, kMethodCount>
      requests_by_code_{};
  prometheus::Family<prometheus::Histogram>& latency_family_;
  std::array<prometheus::Histogram*, kMethodCount> latency_;
  prometheus::Gauge* in_flight_;
  prometheus::Family<prometheus::Counter>& compaction_drops_;
  std::array<prometheus::Counter*, 3> dropped_;  // completed, failed, abandoned
  std::array<uint64_t, 3> dropped_seen_ ABSL_GUARDED_BY(storage_mu_) = {0, 0, 0};
  prometheus::Family<prometheus::Gauge>& records_;
  prometheus::Gauge* storage_bytes_;
  prometheus::Gauge* pending_compaction_bytes_;
  prometheus::Gauge* write_stalled_;
  prometheus::Gauge* background_errors_;
  absl::Mutex storage_mu_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<NamespaceSeries>> series_ ABSL_GUARDED_BY(mu_);
  size_t undeclared_labels_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_METRICS_H_
