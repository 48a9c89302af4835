#include "payment_pipeline.h"

#include <atomic>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dedup/client/guard.h"

namespace dedup::examples {
namespace {

struct Delivery {
  int index;
  bool first_copy;
  int redeliveries_left;  // After a failure.
};

// The broker: hands out deliveries until every one was acknowledged.
class Broker {
 public:
  void Push(Delivery d, bool front = false) {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
    ++deliveries_;
    if (front) {
      queue_.push_front(d);
    } else {
      queue_.push_back(d);
    }
  }

  // Blocks for the next delivery; false when all are acknowledged.
  bool Pop(Delivery* d) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Broker* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mu_) {
          return !b->queue_.empty() || b->outstanding_ == 0;
        },
        this));
    if (queue_.empty()) return false;
    *d = queue_.front();
    queue_.pop_front();
    return true;
  }

  void Ack() {
    absl::MutexLock lock(&mu_);
    --outstanding_;
  }

  int64_t deliveries() {
    absl::MutexLock lock(&mu_);
    return deliveries_;
  }

 private:
  absl::Mutex mu_;
  std::deque<Delivery> queue_ ABSL_GUARDED_BY(mu_);
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t deliveries_ ABSL_GUARDED_BY(mu_) = 0;
};

constexpr absl::string_view kReceiptTokenMark = " with token ";

}  // namespace

std::string ChargeReceipt(absl::string_view key, uint64_t token) {
  return absl::StrCat("charged ", key, kReceiptTokenMark, token);
}

std::optional<uint64_t> TokenOfReceipt(absl::string_view receipt) {
  const size_t mark = receipt.rfind(kReceiptTokenMark);
  uint64_t token = 0;
  if (!absl::StartsWith(receipt, "charged ") || mark == absl::string_view::npos ||
      !absl::SimpleAtoi(receipt.substr(mark + kReceiptTokenMark.size()), &token)) {
    return std::nullopt;
  }
  return token;
}

PipelineReport RunPaymentPipeline(client::Client* client, const PipelineOptions& options) {
  PaymentProvider provider(PaymentProvider::Options{options.charge_time, options.fail_first_every});
  Broker broker;
  for (int i = 0; i < options.payments; ++i) broker.Push(Delivery{i, true, 1});

  std::atomic<int64_t> executed{0}, duplicates{0}, in_progress{0}, failures{0}, errors{0};
  auto consume = [&](int worker) {
    const std::string owner = absl::StrCat(options.run_id, "-worker-", worker);
    std::unique_ptr<client::Guard> guard;
    if (options.use_guard) {
      guard = std::make_unique<client::Guard>(
          client, client::GuardOptions{options.ns, owner, absl::Seconds(30)});
    }
    auto stopped = [&] { return options.stop != nullptr && options.stop->load(); };
    Delivery d;
    while (!stopped() && broker.Pop(&d)) {
      const std::string key = absl::StrCat("pay-", options.run_id, "-", d.index);
      const bool redeliver_now =
          d.first_copy && options.redeliver_every > 0 && d.index % options.redeliver_every == 0;
      // The broker redelivers while this copy is being processed.
      if (redeliver_now) broker.Push(Delivery{d.index, false, 0}, /*front=*/true);
      auto redeliver_after_failure = [&] {
        failures.fetch_add(1);
        if (d.redeliveries_left > 0) broker.Push(Delivery{d.index, false, d.redeliveries_left - 1});
      };

      if (!options.use_guard) {
        if (!provider.Charge(key, 0, d.index).ok()) redeliver_after_failure();
        broker.Ack();
        continue;
      }
      GuardRunTrace trace;
      if (options.on_guard_run) {
        trace.key = key;
        trace.owner = owner;
        trace.started = client->clock().SteadyNow();
      }
      absl::StatusOr<client::GuardResult> result =
          guard->Run(key, [&](const client::GuardContext& ctx) -> absl::StatusOr<std::string> {
            if (options.on_guard_run) {
              trace.worked = true;
              trace.token = ctx.token;
              trace.work_started = client->clock().SteadyNow();
            }
            const absl::Status charged = provider.Charge(ctx.key, ctx.token, d.index);
            absl::StatusOr<std::string> receipt = ChargeReceipt(ctx.key, ctx.token);
            if (!charged.ok()) receipt = charged;
            if (options.on_guard_run) {
              trace.work = receipt;
              trace.work_finished = client->clock().SteadyNow();
            }
            return receipt;
          });
      if (options.on_guard_run) {
        trace.finished = client->clock().SteadyNow();
        trace.result = result;
        options.on_guard_run(trace);
      }
      if (!result.ok()) {
        errors.fetch_add(1);
      } else {
        switch (result->outcome) {
          case client::GuardOutcome::kExecuted:
            executed.fetch_add(1);
            break;
          case client::GuardOutcome::kDuplicate:
            duplicates.fetch_add(1);
            break;
          case client::GuardOutcome::kInProgress:
            // Not acknowledged: the broker redelivers it later.
            in_progress.fetch_add(1);
            broker.Push(Delivery{d.index, false, d.redeliveries_left});
            break;
          case client::GuardOutcome::kWorkFailed:
            redeliver_after_failure();
            break;
          default:
            errors.fetch_add(1);
            break;
        }
      }
      broker.Ack();
    }
  };
  std::vector<std::thread> workers;
  for (int i = 0; i < options.threads; ++i) workers.emplace_back(consume, i);
  for (auto& w : workers) w.join();

  PipelineReport report;
  report.payments = options.payments;
  report.deliveries = broker.deliveries();
  report.charges = provider.charges();
  report.double_charged_keys = provider.double_charged_keys();
  report.executed = executed;
  report.duplicates = duplicates;
  report.in_progress = in_progress;
  report.work_failures = failures;
  report.errors = errors;
  return report;
}

}  // namespace dedup::examples
