#ifndef DEDUP_CLIENT_EXAMPLES_PAYMENT_PIPELINE_H_
#define DEDUP_CLIENT_EXAMPLES_PAYMENT_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dedup/client/client.h"
#include "dedup/client/clock.h"
#include "dedup/client/guard.h"
#include "payment_provider.h"

namespace dedup::examples {

// One delivery's pass through the guard as its worker saw it, for tests
// that record the history of the calls. Instants are the client's
// monotonic clock (Client::clock().SteadyNow()).
struct GuardRunTrace {
  std::string key;
  std::string owner;            // The worker's guard owner.
  client::SteadyTime started;   // Before the Claim was sent.
  client::SteadyTime finished;  // After Guard::Run returned.
  // Whether the side effect ran: the Claim was answered ACQUIRED with
  // `token` by `work_started`, and the Complete (when `work` is a result,
  // the result it carries) was sent after `work_finished`.
  bool worked = false;
  uint64_t token = 0;
  client::SteadyTime work_started;
  client::SteadyTime work_finished;
  absl::StatusOr<std::string> work;
  absl::StatusOr<client::GuardResult> result;
};

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
  // When set, the run ends early once it reads true, as a fleet being shut
  // down: each worker finishes the delivery in hand and takes no more.
  const std::atomic<bool>* stop = nullptr;
  // With the guard: called on the worker's thread after every Guard::Run,
  // from all workers at once. Null: nothing is traced.
  std::function<void(const GuardRunTrace&)> on_guard_run;
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

// The result a charge stores, naming the key and the token it was charged
// with, so that a duplicate handed it back knows which claim charged.
std::string ChargeReceipt(absl::string_view key, uint64_t token);
// The token a ChargeReceipt names; nullopt for any other text.
std::optional<uint64_t> TokenOfReceipt(absl::string_view receipt);

// Runs the pipeline to the end (every delivery acknowledged, or
// options.stop) and reports.
// `client` may be null when !options.use_guard.
PipelineReport RunPaymentPipeline(client::Client* client, const PipelineOptions& options);

}  // namespace dedup::examples

#endif  // DEDUP_CLIENT_EXAMPLES_PAYMENT_PIPELINE_H_
