#include "load_runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "async_submitter.h"
#include "key_source.h"
#include "process_stats.h"
#include "progress_line.h"
#include "run_state.h"

namespace dedup::bench {
namespace {

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
    CountAnswer(status, tally, batch.size(), origin, answered, shared, out);
    if (!status.ok()) std::this_thread::sleep_for(kErrorPause);
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
  const bool async = workload.async_in_flight > 0;
  const int threads = async ? workload.async_threads : workload.callers;
  if (async && (threads < 1 || threads > workload.async_in_flight)) {
    return absl::InvalidArgumentError("async_threads: 1..async_in_flight");
  }
  std::vector<std::unique_ptr<Session>> sessions;
  std::unique_ptr<AsyncSession> async_session;
  if (async) {
    absl::StatusOr<std::unique_ptr<AsyncSession>> session =
        driver.NewAsyncSession(workload.async_in_flight);
    if (!session.ok()) return session.status();
    async_session = *std::move(session);
  }
  for (int i = 0; !async && i < workload.callers; ++i) {
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
  shared.running = threads;

  std::vector<CallerResult> results(threads);
  std::vector<std::thread> callers;
  for (int i = 0; i < threads; ++i) {
    callers.emplace_back([&, i] {
      if (async) {
        // The slots split as evenly as they go.
        const int first = static_cast<int>(int64_t{workload.async_in_flight} * i / threads);
        const int end = static_cast<int>(int64_t{workload.async_in_flight} * (i + 1) / threads);
        RunSubmitter(i, threads, first, end - first, async_session.get(), workload, &keys, &shared,
                     &results[i]);
      } else {
        RunCaller(i, sessions[i].get(), workload, &keys, &shared, &results[i]);
      }
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
