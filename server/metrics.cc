#include "server/metrics.h"

#include <optional>
#include <utility>
#include <variant>

namespace dedup::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using storage::Outcome;

constexpr char kOther[] = "other";

constexpr char kMixed[] = "mixed";

// Latency buckets from 50 µs (an fsync is ~0.1–10 ms) to 60 s, so that a
// Scan over a large namespace lands in a bucket too.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,     0.25,   0.5,     1,      2.5,   5,      10,    30,   60};
}

// Outcome counters: one family per operation kind, labelled from the
// outcome table (proto_mapping.h).
struct OutcomeFamily {
  OutcomeKind kind;
  const char* name;
  const char* help;
};
constexpr std::array<OutcomeFamily, kOutcomeKindCount> kOutcomeFamilies = {{
    {OutcomeKind::kClaim, "dedup_claims_total", "Claims answered, by namespace and outcome."},
    {OutcomeKind::kComplete, "dedup_completes_total",
     "Completes answered, by namespace and outcome."},
    {OutcomeKind::kRelease, "dedup_releases_total", "Releases answered, by namespace and outcome."},
    {OutcomeKind::kExtend, "dedup_extends_total", "Extends answered, by namespace and outcome."},
}};

// The kind of `op` whose outcomes are counted; nullopt for Query.
std::optional<OutcomeKind> KindOf(const storage::Operation& op) {
  if (std::holds_alternative<storage::ClaimOp>(op)) return OutcomeKind::kClaim;
  if (std::holds_alternative<storage::CompleteOp>(op)) return OutcomeKind::kComplete;
  if (std::holds_alternative<storage::ReleaseOp>(op)) return OutcomeKind::kRelease;
  if (std::holds_alternative<storage::ExtendOp>(op)) return OutcomeKind::kExtend;
  return std::nullopt;
}

constexpr std::array<const char*, 3> kDropReasons = {"completed_retention", "failed_retention",
                                                     "abandoned"};

}  // namespace

void Metrics::RecordTlsHandshakeFailures(uint64_t total) {
  absl::MutexLock lock(&storage_mu_);
  if (total > tls_handshake_failures_seen_) {
    tls_handshake_failures_->Increment(static_cast<double>(total - tls_handshake_failures_seen_));
    tls_handshake_failures_seen_ = total;
  }
}

void Metrics::RecordConnectionRefused(ConnectionRefusal reason) {
  connections_refused_[static_cast<size_t>(reason)]->Increment();
}

const char* MethodName(Method method) {
  static constexpr std::array<const char*, kMethodCount> kNames = {
      "Claim", "Complete", "Release", "Extend", "Query", "Batch", "Stream", "Scan"};
  return kNames[static_cast<int>(method)];
}

Metrics::Metrics(const std::vector<std::string>& declared, size_t max_namespace_labels,
                 const std::string& version)
    : max_namespace_labels_(max_namespace_labels),
      registry_(std::make_shared<prometheus::Registry>()),
      duplicates_(BuildCounter()
                      .Name("dedup_duplicates_intercepted_total")
                      .Help("Claims of a key already completed or in progress elsewhere: "
                            "duplicate deliveries that did not run again.")
                      .Register(*registry_)),
      takeovers_(BuildCounter()
                     .Name("dedup_lease_takeovers_total")
                     .Help("Claims that acquired a key over an expired lease (the previous "
                           "holder probably died).")
                     .Register(*registry_)),
      stale_tokens_(BuildCounter()
                        .Name("dedup_stale_tokens_total")
                        .Help("Complete, Release or Extend refused for a token that is not the "
                              "newest (a worker that lost its lease).")
                        .Register(*registry_)),
      mismatches_(BuildCounter()
                      .Name("dedup_fingerprint_mismatches_total")
                      .Help("Claims of a known key with a different fingerprint.")
                      .Register(*registry_)),
      poisoned_(BuildCounter()
                    .Name("dedup_poisoned_total")
                    .Help("Keys that became FAILED after max_attempts acquisitions.")
                    .Register(*registry_)),
      denied_(BuildCounter()
                  .Name("dedup_auth_denied_total")
                  .Help("Calls and Batch or Stream items refused by authorization, by namespace "
                        "and reason: unauthenticated (no identity), unknown_token (a bearer "
                        "token not in the tokens file), throttled (a bearer token from an "
                        "address braked for guessing), no_grant (the identity lacks the role), "
                        "not_holder (a token of a claim another identity holds).")
                  .Register(*registry_)),
      requests_(BuildCounter()
                    .Name("dedup_requests_total")
                    .Help("RPCs finished, by method and gRPC status code.")
                    .Register(*registry_)),
      latency_family_(BuildHistogram()
                          .Name("dedup_request_duration_seconds")
                          .Help("RPC latency from receipt to answer, by method and namespace "
                                "(\"mixed\": a Batch or Stream message spanning several).")
                          .Register(*registry_)),
      in_flight_(&BuildGauge()
                      .Name("dedup_requests_in_flight")
                      .Help("RPCs received and not yet answered.")
                      .Register(*registry_)
                      .Add({})),
      compaction_drops_(BuildCounter()
                            .Name("dedup_compaction_dropped_records_total")
                            .Help("Records removed by TTL compaction, by reason.")
                            .Register(*registry_)),
      records_(BuildGauge()
                   .Name("dedup_records")
                   .Help("Stored records by state (an estimate from sampling; 'expired' "
                         "awaits compaction).")
                   .Register(*registry_)) {
  for (const OutcomeFamily& family : kOutcomeFamilies) {
    outcome_families_[static_cast<size_t>(family.kind)] =
        &BuildCounter().Name(family.name).Help(family.help).Register(*registry_);
  }
  for (Method method : {Method::kBatch, Method::kStream}) {
    mixed_latency_[static_cast<int>(method)] = &latency_family_.Add(
        {{"method", MethodName(method)}, {"namespace", kMixed}}, LatencyBuckets());
  }
  // Every method has its OK series from the start, so rate() sees the first
  // request and dashboards show 0 rather than no data.
  for (int m = 0; m < kMethodCount; ++m) {
    requests_by_code_[m][static_cast<int>(grpc::StatusCode::OK)] =
        &requests_.Add({{"method", MethodName(static_cast<Method>(m))}, {"code", "OK"}});
  }
  for (size_t i = 0; i < kDropReasons.size(); ++i) {
    dropped_[i] = &compaction_drops_.Add({{"reason", kDropReasons[i]}});
  }
  auto gauge = [this](const char* name, const char* help) {
    return &BuildGauge().Name(name).Help(help).Register(*registry_).Add({});
  };
  storage_bytes_ = gauge("dedup_storage_bytes", "Bytes in SST files and memtables (estimate).");
  pending_compaction_bytes_ = gauge("dedup_storage_pending_compaction_bytes",
                                    "Bytes RocksDB estimates compaction must rewrite.");
  write_stalled_ =
      gauge("dedup_storage_write_stalled", "1 while RocksDB delays or stops writes, else 0.");
  volume_free_bytes_ = gauge("dedup_storage_volume_free_bytes",
                             "Bytes free (to dedupd) on the file system of the data directory.");
  volume_total_bytes_ =
      gauge("dedup_storage_volume_total_bytes", "Size of the file system of the data directory.");
  write_stall_seconds_ = &BuildCounter()
                              .Name("dedup_storage_write_stall_seconds_total")
                              .Help("Time writers waited on RocksDB delaying or stopping writes.")
                              .Register(*registry_)
                              .Add({});
  ready_ = gauge("dedup_ready", "1 when /readyz answers 200 (serving, storage healthy), else 0.");
  background_errors_ = gauge("dedup_storage_background_error",
                             "1 while storage refuses writes (disk full, or failed), else 0.");
  auto& clock_steps = BuildCounter()
                          .Name("dedup_clock_step_readings_total")
                          .Help(
                              "Readings of storage time that found the wall clock stepped "
                              "beyond clock_step_tolerance, by direction; a step counts once "
                              "per reading until it is confirmed or undone (design.md §5).")
                          .Register(*registry_);
  clock_forward_steps_ = &clock_steps.Add({{"direction", "forward"}});
  clock_backward_steps_ = &clock_steps.Add({{"direction", "backward"}});
  corrupt_records_ = &BuildCounter()
                          .Name("dedup_storage_corrupt_records_total")
                          .Help(
                              "Reads that met a stored record they could not decode or a "
                              "corrupt block (answered DATA_LOSS, or skipped by Scan).")
                          .Register(*registry_)
                          .Add({});
  auto& refused = BuildCounter()
                      .Name("dedup_connections_refused_total")
                      .Help(
                          "TCP connections to the gRPC port closed as soon as they were "
                          "accepted, by reason: server_limit (limits.max_connections open), "
                          "address_limit (limits.max_connections_per_address open from its "
                          "address), descriptors (no file descriptor left).")
                      .Register(*registry_);
  connections_refused_ = {&refused.Add({{"reason", "server_limit"}}),
                          &refused.Add({{"reason", "address_limit"}}),
                          &refused.Add({{"reason", "descriptors"}})};
  tasks_beyond_share_ = &BuildCounter()
                             .Name("dedup_tasks_beyond_share_total")
                             .Help(
                                 "Calls, Batches and Stream messages of an identity that "
                                 "already had one running while another identity was active, "
                                 "queued to run at the lowest CPU priority.")
                             .Register(*registry_)
                             .Add({});
  tasks_paced_ = &BuildCounter()
                      .Name("dedup_tasks_paced_total")
                      .Help(
                          "Calls, Batches and Stream messages of an identity ahead of "
                          "limits.max_operations_per_second_per_identity, held until their "
                          "time to run.")
                      .Register(*registry_)
                      .Add({});
  tasks_over_rate_ = &BuildCounter()
                          .Name("dedup_tasks_over_rate_total")
                          .Help(
                              "Calls, Batches and Stream messages of an identity refused "
                              "RESOURCE_EXHAUSTED, since they would have waited more than "
                              "half a second for their time under "
                              "limits.max_operations_per_second_per_identity.")
                          .Register(*registry_)
                          .Add({});
  tls_handshake_failures_ = &BuildCounter()
                                 .Name("dedup_tls_handshake_failures_total")
                                 .Help(
                                     "TLS handshakes that failed (no or a bad client "
                                     "certificate, no shared protocol or cipher, not TLS).")
                                 .Register(*registry_)
                                 .Add({});
  connections_open_ = gauge("dedup_connections_open",
                            "TCP connections to the gRPC port, as last counted (those closed "
                            "since may still count).");
  BuildGauge()
      .Name("dedup_build_info")
      .Help("Always 1; the version label says which dedupd runs.")
      .Register(*registry_)
      .Add({{"version", version}})
      .Set(1);
  absl::MutexLock lock(&mu_);
  for (const std::string& ns : declared)
    series_[ns] = std::unique_ptr<NamespaceSeries>(CreateSeries(ns));
  series_[kOther] = std::unique_ptr<NamespaceSeries>(CreateSeries(kOther));
}

Metrics::NamespaceSeries* Metrics::CreateSeries(const std::string& label) {
  auto s = new NamespaceSeries();
  for (const OutcomeFamily& family : kOutcomeFamilies) {
    const size_t kind = static_cast<size_t>(family.kind);
    for (const OutcomeRow& row : OutcomesOf(family.kind)) {
      s->outcomes[kind].push_back(
          &outcome_families_[kind]->Add({{"namespace", label}, {"outcome", row.label}}));
    }
  }
  s->duplicates_completed = &duplicates_.Add({{"namespace", label}, {"kind", "completed"}});
  s->duplicates_in_progress = &duplicates_.Add({{"namespace", label}, {"kind", "in_progress"}});
  s->takeovers = &takeovers_.Add({{"namespace", label}});
  s->stale_tokens = &stale_tokens_.Add({{"namespace", label}});
  s->mismatches = &mismatches_.Add({{"namespace", label}});
  s->poisoned = &poisoned_.Add({{"namespace", label}});
  for (int m = 0; m < kMethodCount; ++m) {
    s->latency[m] = &latency_family_.Add(
        {{"method", MethodName(static_cast<Method>(m))}, {"namespace", label}}, LatencyBuckets());
  }
  return s;
}

Metrics::NamespaceSeries* Metrics::SeriesFor(absl::string_view ns) {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = series_.find(ns); it != series_.end()) return it->second.get();
  }
  absl::MutexLock lock(&mu_);
  if (auto it = series_.find(ns); it != series_.end()) return it->second.get();
  if (undeclared_labels_ >= max_namespace_labels_) return series_[kOther].get();
  ++undeclared_labels_;
  auto& slot = series_[std::string(ns)];
  slot.reset(CreateSeries(std::string(ns)));
  return slot.get();
}

void Metrics::RecordOperation(const storage::Operation& op, const storage::OpResult& result) {
  NamespaceSeries* s = SeriesFor(storage::OpNamespace(op));
  const Outcome outcome = result.outcome;
  if (result.poisoned) s->poisoned->Increment();
  if (outcome == Outcome::kStaleToken) s->stale_tokens->Increment();
  const std::optional<OutcomeKind> kind = KindOf(op);
  if (!kind.has_value()) return;
  s->outcomes[static_cast<size_t>(*kind)][OutcomeIndex(*kind, outcome)]->Increment();
  if (*kind != OutcomeKind::kClaim) return;
  if (outcome == Outcome::kCompleted) s->duplicates_completed->Increment();
  if (outcome == Outcome::kInProgress) s->duplicates_in_progress->Increment();
  if (outcome == Outcome::kMismatch) s->mismatches->Increment();
  if (result.takeover) s->takeovers->Increment();
}

namespace {

// Adds to `counter` what `total` (a count since the store opened) gained
// since `*seen`.
void AddSince(uint64_t total, uint64_t* seen, prometheus::Counter* counter) {
  if (total > *seen) {
    counter->Increment(static_cast<double>(total - *seen));
    *seen = total;
  }
}

}  // namespace

void Metrics::RecordDenied(absl::string_view ns, DenyReason reason) {
  std::string label = kOther;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (series_.contains(ns)) label = std::string(ns);
  }
  // Family::Add returns the existing series for the same labels; denials
  // are rare enough that the lookup costs nothing that matters.
  denied_.Add({{"namespace", label}, {"reason", DenyReasonName(reason)}}).Increment();
}

void Metrics::RecordRequest(Method method, absl::string_view ns, absl::Duration latency,
                            grpc::StatusCode code) {
  const bool refused =
      code == grpc::StatusCode::INVALID_ARGUMENT || code == grpc::StatusCode::NOT_FOUND ||
      code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED;
  const int m = static_cast<int>(method);
  prometheus::Histogram* histogram = nullptr;
  if (!refused && ns.empty()) histogram = mixed_latency_[m];
  if (histogram == nullptr) {
    histogram = SeriesFor(refused || ns.empty() ? absl::string_view(kOther) : ns)->latency[m];
  }
  histogram->Observe(absl::ToDoubleSeconds(latency));
  const int index = static_cast<int>(code);
  if (index < 0 || index >= kGrpcCodeCount) code = grpc::StatusCode::UNKNOWN;
  std::atomic<prometheus::Counter*>& slot = requests_by_code_[m][static_cast<int>(code)];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add returns the same series for the same labels, so a race
    // here only looks it up twice.
    counter = &requests_.Add({{"method", MethodName(method)}, {"code", StatusCodeName(code)}});
    slot.store(counter, std::memory_order_release);
  }
  counter->Increment();
}

void Metrics::RecordStorage(const storage::StoreStats& stats) {
  storage_bytes_->Set(static_cast<double>(stats.storage_bytes));
  pending_compaction_bytes_->Set(static_cast<double>(stats.pending_compaction_bytes));
  write_stalled_->Set(stats.write_stalled ? 1 : 0);
  background_errors_->Set(stats.background_error ? 1 : 0);
  for (size_t i = 0; i < stats.records_by_state.size(); ++i) {
    records_.Add({{"state", storage::StatsStateName(i)}})
        .Set(static_cast<double>(stats.records_by_state[i]));
  }
  volume_free_bytes_->Set(static_cast<double>(stats.volume_free_bytes));
  volume_total_bytes_->Set(static_cast<double>(stats.volume_total_bytes));
  absl::MutexLock lock(&storage_mu_);
  if (stats.write_stall_micros > write_stall_micros_seen_) {
    write_stall_seconds_->Increment(
        static_cast<double>(stats.write_stall_micros - write_stall_micros_seen_) / 1e6);
    write_stall_micros_seen_ = stats.write_stall_micros;
  }
  AddSince(stats.clock_forward_step_readings, &clock_forward_seen_, clock_forward_steps_);
  AddSince(stats.clock_backward_step_readings, &clock_backward_seen_, clock_backward_steps_);
  AddSince(stats.corrupt_records, &corrupt_records_seen_, corrupt_records_);
  const std::array<uint64_t, 3> dropped = {stats.dropped_completed, stats.dropped_failed,
                                           stats.dropped_abandoned};
  for (size_t i = 0; i < dropped.size(); ++i) {
    if (dropped[i] > dropped_seen_[i]) {
      dropped_[i]->Increment(static_cast<double>(dropped[i] - dropped_seen_[i]));
      dropped_seen_[i] = dropped[i];
    }
  }
}

}  // namespace dedup::server
