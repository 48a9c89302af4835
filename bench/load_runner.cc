#include "load_runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "key_source.h"
#include "process_stats.h"
#include "progress_line.h"

namespace dedup::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::nanoseconds;

Clock::duration Seconds(double s) {
  return duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// What the callers share.
struct Shared {
  Clock::time_point start;
  Clock::time_point measure_from;  // End of warm-up.
  Clock::time_point measure_until;
  uint64_t claim_budget = 0;  // 0: none.
  std::atomic<uint64_t> measured{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};  // All claims answered, warm-up included.
  std::atomic<uint64_t> failed{0};
  std::atomic<int> running{0};
  std::mutex error_mu;
  std::string first_error;
};

// One caller's share of the result.
struct CallerResult {
  ClaimTally tally;
  uint64_t claims = 0;
  uint64_t requests = 0;
  LatencyHistogram latency;
  Clock::time_point last_answer;
};

void RunCaller(int index, Session* session, const Workload& workload, KeySource* keys,
               Shared* shared, CallerResult* out) {
  KeySource::Picker picker(keys, 0x9e3779b97f4a7c15ULL * (index + 1));
  const auto interval = workload.rate > 0
                            ? Seconds(workload.callers * workload.batch / workload.rate)
                            : Clock::duration::zero();
  Clock::time_point due = shared->start + interval * index / workload.callers;
  std::vector<std::string> batch(workload.batch);
  while (!shared->stop.load(std::memory_order_relaxed)) {
    if (workload.rate > 0) {
      std::this_thread::sleep_until(due);
    }
    const Clock::time_point sent = Clock::now();
    if (sent >= shared->measure_until) break;
    // Paced, latency counts from when the request was due: a late request
    // waited in the caller's queue, as a message waits in a consumer's.
    const Clock::time_point origin = workload.rate > 0 ? due : sent;
    due += interval;
    bool duplicate = false;
    for (auto& key : batch) key = picker.Next(&duplicate);
    ClaimTally tally;
    const absl::Status status = session->ClaimBatch(batch, &tally);
    const Clock::time_point answered = Clock::now();
    if (!status.ok()) {
      tally.errors += batch.size();
      shared->failed.fetch_add(batch.size(), std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(shared->error_mu);
        if (shared->first_error.empty()) shared->first_error = status.ToString();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // Do not spin on a dead server.
    }
    shared->sent.fetch_add(batch.size(), std::memory_order_relaxed);
    if (origin < shared->measure_from) continue;
    out->tally.acquired += tally.acquired;
    out->tally.duplicate += tally.duplicate;
    out->tally.errors += tally.errors;
    if (status.ok()) out->latency.Record(duration_cast<nanoseconds>(answered - origin).count());
    out->claims += batch.size();
    ++out->requests;
    out->last_answer = answered;
    if (shared->claim_budget > 0 &&
        shared->measured.fetch_add(batch.size()) + batch.size() >= shared->claim_budget) {
      shared->stop = true;
    }
  }
}

void Watch(const Shared& shared, const Workload& workload, const RunnerOptions& options,
           ProgressLine* progress) {
  const Clock::time_point give_up = shared.measure_until + Seconds(options.overrun_seconds);
  Clock::time_point next_line = shared.start + std::chrono::seconds(1);
  uint64_t last_sent = 0;
  while (shared.running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const Clock::time_point now = Clock::now();
    if (now > give_up) {
      std::fprintf(stderr, "\ndedup_bench: run still going %.0fs after its end; giving up\n",
                   options.overrun_seconds);
      _exit(3);
    }
    if (now >= next_line) {
      const uint64_t sent = shared.sent.load();
      const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(now - shared.start);
      progress->Show(
          absl::StrCat("[", options.label, "] ", now < shared.measure_from ? "warm-up" : "measure",
                       " ", elapsed.count(), "s/",
                       static_cast<int>(workload.warmup_seconds + workload.duration_seconds), "s  ",
                       sent, " claims  ", sent - last_sent, "/s  errors ", shared.failed.load()));
      last_sent = sent;
      next_line += std::chrono::seconds(1);
    }
  }
  progress->Done();
}

}  // namespace

absl::StatusOr<RunResult> RunLoad(Driver& driver, const Workload& workload,
                                  const RunnerOptions& options) {
  if (absl::Status s = driver.Prepare(); !s.ok()) return s;
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < workload.callers; ++i) {
    absl::StatusOr<std::unique_ptr<Session>> session = driver.NewSession(i);
    if (!session.ok()) return session.status();
    sessions.push_back(*std::move(session));
  }
  KeySource keys(workload.key_prefix, workload.duplicate_ratio, workload.recent_window);
  Shared shared;
  shared.start = Clock::now();
  shared.measure_from = shared.start + Seconds(workload.warmup_seconds);
  shared.measure_until = shared.measure_from + Seconds(workload.duration_seconds);
  shared.claim_budget = workload.max_claims;
  shared.running = workload.callers;

  std::vector<CallerResult> results(workload.callers);
  std::vector<std::thread> callers;
  for (int i = 0; i < workload.callers; ++i) {
    callers.emplace_back([&, i] {
      RunCaller(i, sessions[i].get(), workload, &keys, &shared, &results[i]);
      --shared.running;
    });
  }
  ProgressLine progress(options.progress);
  std::thread watcher([&] { Watch(shared, workload, options, &progress); });

  std::this_thread::sleep_until(shared.measure_from);
  const double server_cpu_before =
      options.server_pid > 0 ? CpuSeconds(options.server_pid, options.server_descendants) : -1;
  const double client_cpu_before = OwnCpuSeconds();
  const CpuCensus census_before = CpuCensus::Take();
  for (auto& caller : callers) caller.join();
  const double server_cpu_after =
      options.server_pid > 0 ? CpuSeconds(options.server_pid, options.server_descendants) : -1;
  const double client_cpu_after = OwnCpuSeconds();
  const CpuCensus census_after = CpuCensus::Take();
  watcher.join();

  RunResult result;
  Clock::time_point last_answer = shared.measure_from;
  for (const CallerResult& caller : results) {
    result.claims += caller.claims;
    result.requests += caller.requests;
    result.acquired += caller.tally.acquired;
    result.duplicates += caller.tally.duplicate;
    result.errors += caller.tally.errors;
    result.latency.Merge(caller.latency);
    last_answer = std::max(last_answer, caller.last_answer);
  }
  result.first_error = shared.first_error;
  result.elapsed_seconds = std::chrono::duration<double>(last_answer - shared.measure_from).count();
  if (server_cpu_before >= 0 && server_cpu_after >= 0) {
    result.server_cpu_seconds = server_cpu_after - server_cpu_before;
  }
  result.client_cpu_seconds = client_cpu_after - client_cpu_before;
  result.other_cpu_seconds =
      census_after.OthersSince(census_before, options.server_pid, options.server_descendants);
  return result;
}

}  // namespace dedup::bench
