#include "server/grpc_log.h"

#include <atomic>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpc/support/log.h"
#include "server/logging.h"

namespace dedup::server {
namespace {

constexpr absl::Duration kGrpcLogInterval = absl::Seconds(10);

std::atomic<uint64_t> failed_handshakes{0};

absl::Mutex limiter_mu;
LogRateLimiter* Limiter() ABSL_EXCLUSIVE_LOCKS_REQUIRED(limiter_mu) {
  static LogRateLimiter* const limiter = new LogRateLimiter(kGrpcLogInterval);
  return limiter;
}

spdlog::level::level_enum LevelOf(gpr_log_severity severity) {
  switch (severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      return spdlog::level::debug;
    case GPR_LOG_SEVERITY_INFO:
      return spdlog::level::info;
    case GPR_LOG_SEVERITY_ERROR:
      return spdlog::level::err;
  }
  return spdlog::level::err;
}

// The file's name without its directories.
absl::string_view BaseName(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash != nullptr ? slash + 1 : file;
}

void WriteGrpcLine(gpr_log_func_args* args) {
  const absl::string_view file = BaseName(args->file != nullptr ? args->file : "");
  const absl::string_view message = args->message != nullptr ? args->message : "";
  // gRPC 1.51 reports each failed TLS handshake from here.
  const bool handshake =
      file == "ssl_transport_security.cc" && absl::StartsWith(message, "Handshake failed");
  if (handshake) failed_handshakes.fetch_add(1, std::memory_order_relaxed);
  const std::string source = absl::StrCat(file, ":", args->line);
  uint64_t suppressed = 0;
  {
    absl::MutexLock lock(&limiter_mu);
    if (!Limiter()->Admit(source, absl::Now(), &suppressed)) return;
  }
  LogEvent(
      LevelOf(args->severity), handshake ? "TLS handshake failed" : "grpc",
      {{"grpc_message", message}, {"grpc_source", source}, {"suppressed_since_last", suppressed}});
}

}  // namespace

bool LogRateLimiter::Admit(const std::string& source, absl::Time now, uint64_t* suppressed) {
  Source& entry = sources_[source];
  if (now - entry.last_written < interval_) {
    ++entry.suppressed;
    return false;
  }
  *suppressed = entry.suppressed;
  entry.suppressed = 0;
  entry.last_written = now;
  return true;
}

void RouteGrpcLog() { gpr_set_log_function(WriteGrpcLine); }

uint64_t FailedTlsHandshakes() { return failed_handshakes.load(std::memory_order_relaxed); }

}  // namespace dedup::server
