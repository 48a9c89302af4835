#include "tests/blackbox/pipeline_history.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

namespace dedup::blackbox {
namespace {

using ::dedup::client::GuardOutcome;
using ::dedup::test::HistoryOp;

// What the Claim of a run that did not reach the side effect was answered.
HistoryOp::Answer ClaimAnswerWithoutWork(const absl::StatusOr<client::GuardResult>& result) {
  if (!result.ok()) return HistoryOp::Answer::kNone;
  switch (result->outcome) {
    case GuardOutcome::kDuplicate:
      return HistoryOp::Answer::kCompleted;
    case GuardOutcome::kInProgress:
      return HistoryOp::Answer::kInProgress;
    case GuardOutcome::kFailed:
      return HistoryOp::Answer::kFailed;
    case GuardOutcome::kMismatch:
      return HistoryOp::Answer::kMismatch;
    default:
      // Executed, work failed and stale all mean the side effect ran; a
      // trace that says otherwise is not a Claim answer we can name.
      return HistoryOp::Answer::kNone;
  }
}

// What the Complete of a run whose side effect produced a receipt was
// answered.
HistoryOp::Answer CompleteAnswer(const absl::StatusOr<client::GuardResult>& result) {
  if (!result.ok()) return HistoryOp::Answer::kNone;
  switch (result->outcome) {
    case GuardOutcome::kExecuted:
      return HistoryOp::Answer::kOk;
    case GuardOutcome::kStale:
      return HistoryOp::Answer::kStaleToken;
    default:
      return HistoryOp::Answer::kNone;
  }
}

}  // namespace

int64_t PipelineHistory::Instant(client::SteadyTime t) {
  return absl::ToInt64Nanoseconds(t - client::SteadyTime());
}

std::function<void(const examples::GuardRunTrace&)> PipelineHistory::Hook() {
  return [this](const examples::GuardRunTrace& trace) { Add(trace); };
}

void PipelineHistory::Add(const examples::GuardRunTrace& trace) {
  HistoryOp claim;
  claim.kind = HistoryOp::Kind::kClaim;
  claim.key = trace.key;
  claim.owner = trace.owner;
  claim.invoked = Instant(trace.started);
  if (trace.worked) {
    claim.returned = Instant(trace.work_started);
    claim.answer = HistoryOp::Answer::kAcquired;
    claim.token = trace.token;
  } else {
    claim.returned = Instant(trace.finished);
    claim.answer = ClaimAnswerWithoutWork(trace.result);
    if (claim.answer == HistoryOp::Answer::kCompleted) {
      claim.result = trace.result->result;
      claim.token = examples::TokenOfReceipt(claim.result).value_or(0);
    }
  }

  std::optional<HistoryOp> complete;
  if (trace.worked && trace.work.ok()) {
    complete.emplace();
    complete->kind = HistoryOp::Kind::kComplete;
    complete->key = trace.key;
    complete->owner = trace.owner;
    complete->token = trace.token;
    complete->result = *trace.work;
    complete->invoked = Instant(trace.work_finished);
    complete->returned = Instant(trace.finished);
    complete->answer = CompleteAnswer(trace.result);
  }

  absl::MutexLock lock(&mu_);
  ++runs_;
  ops_.push_back(std::move(claim));
  if (complete.has_value()) {
    if (complete->answer == HistoryOp::Answer::kOk) acknowledged_[trace.key] = complete->result;
    ops_.push_back(*std::move(complete));
  }
}

std::vector<test::HistoryOp> PipelineHistory::Ops() const {
  absl::MutexLock lock(&mu_);
  return ops_;
}

std::map<std::string, std::string> PipelineHistory::Acknowledged() const {
  absl::MutexLock lock(&mu_);
  return acknowledged_;
}

int64_t PipelineHistory::runs() const {
  absl::MutexLock lock(&mu_);
  return runs_;
}

std::vector<absl::Duration> PipelineHistory::Latencies(client::SteadyTime from,
                                                       client::SteadyTime to) const {
  const int64_t begin = Instant(from);
  const int64_t end = Instant(to);
  std::vector<absl::Duration> latencies;
  absl::MutexLock lock(&mu_);
  for (const HistoryOp& op : ops_) {
    if (op.invoked >= begin && op.invoked < end) {
      latencies.push_back(absl::Nanoseconds(op.returned - op.invoked));
    }
  }
  return latencies;
}

absl::Duration Percentile(std::vector<absl::Duration> samples, double fraction) {
  if (samples.empty()) return absl::ZeroDuration();
  std::sort(samples.begin(), samples.end());
  const size_t rank = static_cast<size_t>(std::ceil(fraction * samples.size()));
  return samples[std::clamp<size_t>(rank, 1, samples.size()) - 1];
}

}  // namespace dedup::blackbox
