#include "report.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace dedup::bench {
namespace {

using Json = nlohmann::ordered_json;

// JSON has no NaN or infinity, and a measurement that was not taken is
// negative: both become null.
Json Measured(double value) {
  if (!std::isfinite(value) || value < 0) return nullptr;
  return value;
}

double Micros(uint64_t nanos) { return nanos / 1000.0; }

bool Async(const Workload& workload) { return workload.async_in_flight > 0; }

double CpuPerMillion(const RunResult& result) {
  if (result.server_cpu_seconds < 0 || result.claims == 0) return NAN;
  return result.server_cpu_seconds * 1e6 / result.claims;
}

}  // namespace

std::string ToJson(const RunContext& context, const Workload& workload, const RunResult& result) {
  const LatencyHistogram& h = result.latency;
  Json out;
  out["tool"] = "dedup_bench";
  out["system"] = context.system;
  out["variant"] = context.variant;
  out["label"] = context.label;
  out["description"] = context.description;
  out["workload"] = {
      {"mode", Async(workload) ? "async" : "blocking"},
      // Requests in flight: the callers', or the asynchronous claims'.
      {"in_flight", Async(workload) ? workload.async_in_flight : workload.callers},
      {"async_threads", Async(workload) ? workload.async_threads : 0},
      {"callers", workload.callers},
      {"batch", workload.batch},
      {"duplicate_ratio", Measured(workload.duplicate_ratio)},
      {"recent_window", workload.recent_window},
      {"lease_ms", workload.lease_ms},
      {"complete", workload.complete},
      {"retention_ms", workload.retention_ms},
      {"result_bytes", workload.result_bytes},
      {"namespace", workload.ns},
      {"rate", Measured(workload.rate)},
      {"warmup_s", Measured(workload.warmup_seconds)},
      {"duration_s", Measured(workload.duration_seconds)},
      {"max_claims", workload.max_claims},
  };
  out["claims"] = result.claims;
  out["requests"] = result.requests;
  out["acquired"] = result.acquired;
  out["duplicates"] = result.duplicates;
  out["errors"] = result.errors;
  out["first_error"] = result.first_error;
  out["elapsed_s"] = Measured(result.elapsed_seconds);
  out["throughput"] = Measured(result.throughput());
  out["latency_us"] = {
      {"p50", Micros(h.Percentile(0.50))}, {"p90", Micros(h.Percentile(0.90))},
      {"p99", Micros(h.Percentile(0.99))}, {"p999", Micros(h.Percentile(0.999))},
      {"max", Micros(h.max_nanos())},      {"mean", Measured(Micros(h.mean_nanos()))},
  };
  out["server"] = {
      {"pid", context.server_pid},
      {"cpu_seconds", Measured(result.server_cpu_seconds)},
      {"cpu_s_per_million_claims", Measured(CpuPerMillion(result))},
      {"rss_bytes", context.server_rss_bytes},
      {"data_dir", context.data_dir},
      {"data_bytes", context.data_bytes},
  };
  out["client_cpu_seconds"] = Measured(result.client_cpu_seconds);
  out["machine"] = {{"other_cpu_seconds", Measured(result.other_cpu_seconds)}};
  // Error texts may carry bytes that are not UTF-8: replace, never throw.
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string ToTable(const RunContext& context, const Workload& workload, const RunResult& result) {
  const LatencyHistogram& h = result.latency;
  std::string out =
      absl::StrFormat("%s%s%s: %s\n", context.system, context.variant.empty() ? "" : "/",
                      context.variant, context.description);
  const std::string concurrency =
      Async(workload)
          ? absl::StrFormat("async %d in flight from %d thread%s", workload.async_in_flight,
                            workload.async_threads, workload.async_threads == 1 ? "" : "s")
          : absl::StrFormat("callers %d", workload.callers);
  absl::StrAppendFormat(&out, "  %s  batch %d  duplicates %.0f%%  lease %dms%s  rate %s\n",
                        concurrency, workload.batch, workload.duplicate_ratio * 100,
                        workload.lease_ms, workload.complete ? "  +complete" : "",
                        workload.rate > 0 ? absl::StrFormat("%.0f/s", workload.rate) : "max");
  absl::StrAppendFormat(&out, "  %-12s %-10s %-10s %-10s %-10s %-10s %-10s\n", "claims/s", "p50 us",
                        "p99 us", "p99.9 us", "max us", "srv cpu/M", "errors");
  absl::StrAppendFormat(
      &out, "  %-12.0f %-10.0f %-10.0f %-10.0f %-10.0f %-10s %-10d\n", result.throughput(),
      Micros(h.Percentile(0.50)), Micros(h.Percentile(0.99)), Micros(h.Percentile(0.999)),
      Micros(h.max_nanos()),
      std::isfinite(CpuPerMillion(result)) ? absl::StrFormat("%.1fs", CpuPerMillion(result)) : "-",
      result.errors);
  absl::StrAppendFormat(&out, "  %d claims in %.2fs: %d acquired, %d duplicate; client cpu %.2fs",
                        result.claims, result.elapsed_seconds, result.acquired, result.duplicates,
                        result.client_cpu_seconds);
  if (result.other_cpu_seconds >= 0) {
    absl::StrAppendFormat(&out, "; other processes' cpu %.2fs", result.other_cpu_seconds);
  }
  if (context.server_rss_bytes > 0) {
    absl::StrAppendFormat(&out, "; server rss %.1f MiB", context.server_rss_bytes / 1048576.0);
  }
  if (context.data_bytes > 0) {
    absl::StrAppendFormat(&out, "; data %.1f MiB", context.data_bytes / 1048576.0);
  }
  out += "\n";
  if (!result.first_error.empty()) out += "  first error: " + result.first_error + "\n";
  return out;
}

}  // namespace dedup::bench
