#ifndef DEDUP_SERVER_GRPC_LOG_H_
#define DEDUP_SERVER_GRPC_LOG_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace dedup::server {

// At most one line per `interval` for each source of repeated lines; the
// line let through after a quiet spell says how many were held back.
// Not thread-safe: the caller locks.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(absl::Duration interval) : interval_(interval) {}

  // Whether a line from `source` at `now` is written. When it is,
  // `*suppressed` is how many lines of `source` were held back before it.
  bool Admit(const std::string& source, absl::Time now, uint64_t* suppressed);

 private:
  struct Source {
    absl::Time last_written = absl::InfinitePast();
    uint64_t suppressed = 0;
  };
  const absl::Duration interval_;
  absl::flat_hash_map<std::string, Source> sources_;
};

// Routes gRPC's own log lines (TLS handshake failures, failed accepts...)
// into dedupd's log (logging.h), in its format, at most one line per 10 s
// from each place in gRPC's code, and counts failed TLS handshakes. A
// hostile client that fails handshakes on purpose therefore cannot flood
// the log. Idempotent; call before gRPC starts.
void RouteGrpcLog();

// TLS handshakes this process failed, as gRPC reported them, since start.
uint64_t FailedTlsHandshakes();

}  // namespace dedup::server

#endif  // DEDUP_SERVER_GRPC_LOG_H_
