#ifndef DEDUP_CLIENT_EXAMPLES_PAYMENT_PIPELINE_H_
#define DEDUP_CLIENT_EXAMPLES_PAYMENT_PIPELINE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "dedup/client/client.h"
#include "payment_provider.h"

namespace dedup::examples {

// A payment-callback consumer fleet fed by an at-least-once broker, as seen
// in the field: some messages are redelivered while their first copy is
// still being processed, and some charges fail once and are redelivered.
struct PipelineOptions {
  int payments = 2000;
  int threads = 8;
  // One payment in every `redeliver_every` is delivered a second time while
  // the first copy is being processed (0: never).
  int redeliver_every = 20;
  // The provider fails the first attempt of one payment in this many, and
  // the broker redelivers it (0: never).
  int fail_first_every = 0;
  absl::Duration charge_time = absl::Milliseconds(1);
  // Deduplicate with the guard (true) or charge every delivery (false).
  bool use_guard = true;
  std::string ns = "payment-callback";
  // Prefix of the keys, so that runs against one server do not collide.
  std::string run_id = "run";
};

struct PipelineReport {
  int64_t payments = 0;
  int64_t deliveries = 0;  // Messages the broker handed out.
  int64_t charges = 0;     // Successful charges at the provider.
  int64_t double_charged_keys = 0;
  int64_t executed = 0;       // Guard: side effect ran and completed.
  int64_t duplicates = 0;     // Guard: a COMPLETED duplicate, stored result returned.
  int64_t in_progress = 0;    // Guard: another worker had it; redelivered later.
  int64_t work_failures = 0;  // Charge failed; released and redelivered.
  int64_t errors = 0;         // dedupd could not be reached.
};

// Runs the pipeline to the end (every delivery acknowledged) and reports.
// `client` may be null when !options.use_guard.
PipelineReport RunPaymentPipeline(client::Client* client, const PipelineOptions& options);

}  // namespace dedup::examples

#endif  // DEDUP_CLIENT_EXAMPLES_PAYMENT_PIPELINE_H_
