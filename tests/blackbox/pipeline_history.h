#ifndef DEDUP_TESTS_BLACKBOX_PIPELINE_HISTORY_H_
#define DEDUP_TESTS_BLACKBOX_PIPELINE_HISTORY_H_

// The history of the field experiment's calls (client/examples/
// payment_pipeline.h), recorded through its guard trace, in the form the
// history checker reads (tests/common/history_checker.h).
//
// Each Guard::Run becomes one or two operations:
//  - its Claim, sent at `started` and answered by the time the side effect
//    began (ACQUIRED, with the token the side effect held) or by `finished`
//    (COMPLETED, IN_PROGRESS, ...; no answer when Run failed before the side
//    effect). A COMPLETED answer's token is read from the replayed receipt,
//    which names it (examples::ChargeReceipt);
//  - when the side effect produced a receipt, its Complete, sent after the
//    side effect returned and answered by `finished`: OK when Run says
//    executed (the guard does not tell OK from ALREADY_COMPLETED, which
//    both mean this token's completion stands), STALE_TOKEN when stale, no
//    answer when Run failed.
// The intervals are never narrower than the calls really took, so the
// checker can only be more lenient than with exact ones, never wrong.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/examples/payment_pipeline.h"
#include "dedup/client/clock.h"
#include "tests/common/history_checker.h"

namespace dedup::blackbox {

// Thread-safe: the pipeline's workers add to it while the test reads it.
class PipelineHistory {
 public:
  // The trace hook to put in examples::PipelineOptions::on_guard_run. It
  // refers to this history, which must outlive the pipeline run.
  std::function<void(const examples::GuardRunTrace&)> Hook();

  // Records one pass through the guard.
  void Add(const examples::GuardRunTrace& trace);

  // Every operation recorded so far.
  std::vector<test::HistoryOp> Ops() const;
  // Keys whose Complete was acknowledged, with the result it stored.
  std::map<std::string, std::string> Acknowledged() const;
  // Guard runs recorded so far.
  int64_t runs() const;
  // How long each call sent in [from, to) took, from sending to answer,
  // answered or not.
  std::vector<absl::Duration> Latencies(client::SteadyTime from, client::SteadyTime to) const;

  // An instant as HistoryOp stores it: nanoseconds on the client's
  // monotonic clock.
  static int64_t Instant(client::SteadyTime t);

 private:
  mutable absl::Mutex mu_;
  std::vector<test::HistoryOp> ops_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> acknowledged_ ABSL_GUARDED_BY(mu_);
  int64_t runs_ ABSL_GUARDED_BY(mu_) = 0;
};

// The value below which `fraction` (0..1] of `samples` lie (nearest rank);
// zero for no samples.
absl::Duration Percentile(std::vector<absl::Duration> samples, double fraction);

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_PIPELINE_HISTORY_H_
