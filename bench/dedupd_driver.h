#ifndef DEDUP_BENCH_DEDUPD_DRIVER_H_
#define DEDUP_BENCH_DEDUPD_DRIVER_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "dedup/client/client.h"
#include "driver.h"
#include "workload.h"

namespace dedup::bench {

// How claims reach dedupd.
enum class DedupdApi {
  // The client library (dedup::client::Client) shared by all callers: each
  // caller's synchronous Claim is coalesced with the others' onto Stream
  // batches. With batch > 1 a caller issues its claims asynchronously and
  // waits for all of them.
  kClient,
  // The client library with coalescing off: one unary RPC per claim.
  kUnary,
  // The generated stub: one Batch RPC of `batch` claims per request.
  kBatch,
};

struct DedupdDriverOptions {
  std::string target = "127.0.0.1:7400";
  DedupdApi api = DedupdApi::kClient;
  absl::Duration batch_window = absl::Microseconds(200);
  int max_batch = 64;
  int max_batches_in_flight = 4;
  // ClientOptions::completed_cache_entries (0: off).
  int completed_cache_entries = 0;
  absl::Duration timeout = absl::Seconds(10);
  // Sent as "authorization: Bearer TOKEN" on every Batch (kBatch only);
  // empty: none.
  std::string bearer_token;
};

// Drives a dedupd server. All sessions share one client (one HTTP/2
// channel), as the processes of a real consumer would.
std::unique_ptr<Driver> MakeDedupdDriver(const DedupdDriverOptions& options,
                                         const Workload& workload);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_DEDUPD_DRIVER_H_
