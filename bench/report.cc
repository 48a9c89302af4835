#include "report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dedup::bench {
namespace {

std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// JSON has no NaN or infinity; those become null.
std::string Number(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.6g", value);
}

// A measurement that is negative when it was not taken.
std::string Nullable(double value) { return value < 0 ? "null" : Number(value); }

double Micros(uint64_t nanos) { return nanos / 1000.0; }

double CpuPerMillion(const RunResult& result) {
  if (result.server_cpu_seconds < 0 || result.claims == 0) return NAN;
  return result.server_cpu_seconds * 1e6 / result.claims;
}

}  // namespace

std::string ToJson(const RunContext& context, const Workload& workload, const RunResult& result) {
  const LatencyHistogram& h = result.latency;
  return absl::StrCat(
      "{\"tool\":\"dedup_bench\",\"system\":", Quote(context.system),
      ",\"variant\":", Quote(context.variant), ",\"label\":", Quote(context.label),
      ",\"description\":", Quote(context.description),
      ",\"workload\":{\"callers\":", workload.callers, ",\"batch\":", workload.batch,
      ",\"duplicate_ratio\":", Number(workload.duplicate_ratio),
      ",\"recent_window\":", workload.recent_window, ",\"lease_ms\":", workload.lease_ms,
      ",\"complete\":", workload.complete ? "true" : "false",
      ",\"retention_ms\":", workload.retention_ms, ",\"result_bytes\":", workload.result_bytes,
      ",\"namespace\":", Quote(workload.ns), ",\"rate\":", Number(workload.rate),
      ",\"warmup_s\":", Number(workload.warmup_seconds),
      ",\"duration_s\":", Number(workload.duration_seconds),
      ",\"max_claims\":", workload.max_claims, "}", ",\"claims\":", result.claims,
      ",\"requests\":", result.requests, ",\"acquired\":", result.acquired,
      ",\"duplicates\":", result.duplicates, ",\"errors\":", result.errors,
      ",\"first_error\":", Quote(result.first_error),
      ",\"elapsed_s\":", Number(result.elapsed_seconds),
      ",\"throughput\":", Number(result.throughput()),
      ",\"latency_us\":{\"p50\":", Number(Micros(h.Percentile(0.50))),
      ",\"p90\":", Number(Micros(h.Percentile(0.90))),
      ",\"p99\":", Number(Micros(h.Percentile(0.99))),
      ",\"p999\":", Number(Micros(h.Percentile(0.999))), ",\"max\":", Number(Micros(h.max_nanos())),
      ",\"mean\":", Number(Micros(h.mean_nanos())), "}",
      ",\"server\":{\"pid\":", context.server_pid,
      ",\"cpu_seconds\":", Nullable(result.server_cpu_seconds),
      ",\"cpu_s_per_million_claims\":", Number(CpuPerMillion(result)),
      ",\"rss_bytes\":", context.server_rss_bytes, ",\"data_dir\":", Quote(context.data_dir),
      ",\"data_bytes\":", context.data_bytes, "}",
      ",\"client_cpu_seconds\":", Number(result.client_cpu_seconds),
      ",\"machine\":{\"other_cpu_seconds\":", Nullable(result.other_cpu_seconds), "}}");
}

std::string ToTable(const RunContext& context, const Workload& workload, const RunResult& result) {
  const LatencyHistogram& h = result.latency;
  std::string out =
      absl::StrFormat("%s%s%s: %s\n", context.system, context.variant.empty() ? "" : "/",
                      context.variant, context.description);
  absl::StrAppendFormat(&out, "  callers %d  batch %d  duplicates %.0f%%  lease %dms%s  rate %s\n",
                        workload.callers, workload.batch, workload.duplicate_ratio * 100,
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
