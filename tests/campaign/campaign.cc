// The long fault campaign (README, "Reliability"): cycles of SIGKILL of the
// dedupd binary, power loss and full disk under the fault file system, and
// wall-clock steps, each under mixed load, with every answer checked by an
// expected-state oracle (expected_state.h). Run through tests/campaign/run;
// not part of the default suite.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/clock.h"
#include "storage/store.h"
#include "storage/testing/rocksdb_env.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/campaign/expected_state.h"
#include "tests/campaign/mixed_load.h"
#include "tests/campaign/target.h"
#include "tests/common/fault_injection_file_system.h"
#include "tests/common/temp_dir.h"

namespace dedup::campaign {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kWorkers = 4;
constexpr int64_t kToleranceMs = 1000;
constexpr int64_t kConfirmationMs = 10 * 60'000;

struct Args {
  int sigkill = 100;
  int power_loss = 100;
  int disk_full = 20;
  int clock_steps = 20;
  int64_t duration_s = 0;  // 0: no time bound.
  uint64_t seed = 1;
  std::string work_dir;  // Empty: a fresh temp directory.
  // A deliberately broken store, to show the oracle catches it:
  // "unsynced_fsync" (power loss) or "unprotected_clock" (clock steps).
  std::string fault_rollback;
};

constexpr char kUsage[] = R"(dedup_campaign: the long fault campaign of dedupd.

Runs cycles of four kinds, interleaved, each under mixed load (claims,
completes, releases, extends; unary, Batch and Stream calls; three namespace
policies), and checks every answer with an expected-state oracle:
acknowledged completes are durable, tokens grow, at most one ACQUIRED per
token, no COMPLETED answer is made up.
  sigkill      the dedupd binary (--durability=fsync) is SIGKILLed mid-load
               and restarted; acknowledged completes are read back
  power loss   a store on the fault file system loses every unsynced write
               mid-load (fsync durability) and reopens
  full disk    the fault file system runs out of space mid-load; reads must
               keep answering, and writes resume after Store::Recover
  clock steps  a store on a manual clock has its wall clock stepped forward
               or back by 2 min..3 h mid-load, compacted, and stepped back;
               every 4th cycle restarts across a backward step

Flags (all optional):
  --sigkill=N        SIGKILL cycles (default 100)
  --power_loss=N     power-loss cycles (default 100)
  --disk_full=N      full-disk episodes (default 20)
  --clock_steps=N    clock-step cycles (default 20)
  --duration=SECONDS stop starting cycles after this long (default: none)
  --seed=N           random seed (default 1)
  --work_dir=DIR     where data directories go (default: a new temp dir,
                     removed at the end)
  --fault_rollback=unsynced_fsync|unprotected_clock
                     run against a deliberately broken store (fsync mode
                     that does not sync; storage time that is the raw wall
                     clock) to see the oracle fail
  --help             this text

Prints one progress line per cycle and a table of figures at the end.
Exits 0 when the oracle found no violation, 1 when it did, 2 on bad flags.
)";

bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    bool ok = true;
    if (name == "--help" || name == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (name == "--sigkill") {
      ok = absl::SimpleAtoi(value, &args->sigkill);
    } else if (name == "--power_loss") {
      ok = absl::SimpleAtoi(value, &args->power_loss);
    } else if (name == "--disk_full") {
      ok = absl::SimpleAtoi(value, &args->disk_full);
    } else if (name == "--clock_steps") {
      ok = absl::SimpleAtoi(value, &args->clock_steps);
    } else if (name == "--duration") {
      ok = absl::SimpleAtoi(value, &args->duration_s);
    } else if (name == "--seed") {
      ok = absl::SimpleAtoi(value, &args->seed);
    } else if (name == "--fault_rollback") {
      args->fault_rollback = value;
      ok = value == "unsynced_fsync" || value == "unprotected_clock";
    } else if (name == "--work_dir") {
      args->work_dir = value;
      ok = !value.empty();
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad flag: %s (see --help)\n", arg.c_str());
      return false;
    }
  }
  return true;
}

int64_t MsSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(SteadyClock::now() - start).count();
}

// The figures of one kind of cycle.
struct Figures {
  int cycles = 0;
  LoadCounts load;
  uint64_t read_back = 0;  // Acknowledged completes queried after the fault.
  uint64_t unanswered_reads = 0;
  int64_t fault_ms_total = 0;     // Load time before the fault.
  int64_t recovery_ms_total = 0;  // Restart, reopen or resume.
  int64_t recovery_ms_max = 0;
  std::string extra;  // Kind-specific, for the table.
  void Recovered(int64_t ms) {
    recovery_ms_total += ms;
    recovery_ms_max = std::max(recovery_ms_max, ms);
  }
};

// Waits until the load has answered `answers` more operations, all its
// workers stopped, or `limit` passed.
void AwaitProgress(const MixedLoad& load, uint64_t answers, milliseconds limit) {
  const uint64_t target = load.answered() + answers;
  const SteadyClock::time_point end = SteadyClock::now() + limit;
  while (load.answered() < target && load.running() > 0 && SteadyClock::now() < end) {
    std::this_thread::yield();
  }
}

std::string Calls(const LoadCounts& c) {
  return absl::StrCat(c.calls[0], "/", c.calls[1], "/", c.calls[2]);
}

class Campaign {
 public:
  Campaign(const Args& args, std::string work_dir)
      : args_(args), work_(std::move(work_dir)), rng_(args.seed) {}

  int Run();

 private:
  bool SigkillCycle(int n);
  bool PowerLossCycle(int n);
  bool DiskFullEpisode(int n);
  bool ClockStepCycle(int n);
  bool OpenFaultStore();
  bool OpenClockStore();
  void Progress(const char* kind, int n, int of, const std::string& line) const;
  void PrintTable() const;
  uint64_t Violations() const {
    return sigkill_oracle_.totals().violations + fault_oracle_.totals().violations +
           clock_oracle_.totals().violations + clock_problems_;
  }

  const Args args_;
  const std::string work_;
  std::mt19937_64 rng_;
  const SteadyClock::time_point start_ = SteadyClock::now();

  // SIGKILL: the dedupd binary.
  ExpectedState sigkill_oracle_;
  std::unique_ptr<blackbox::ServingDedupd> server_;
  Figures sigkill_;

  // Power loss and full disk: a store on the fault file system.
  ExpectedState fault_oracle_;
  std::pair<std::shared_ptr<test::FaultInjectionFileSystem>, std::shared_ptr<rocksdb::Env>> fs_ =
      test::FaultInjectionFileSystem::Make();
  std::unique_ptr<storage::Store> fault_store_;
  Figures power_;
  Figures disk_;
  int disk_not_reached_ = 0;
  int disk_reopened_ = 0;

  // Clock steps: a store on a manual clock.
  ExpectedState clock_oracle_;
  storage::ManualClock clock_{
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count()};
  const int64_t clock_origin_ms_ = clock_.NowMs();
  std::unique_ptr<storage::Store> clock_store_;
  Figures steps_;
  int64_t max_lead_ms_ = 0;
  int64_t last_storage_ms_ = 0;
  int clock_restarts_ = 0;
  int probes_ = 0;
  uint64_t clock_problems_ = 0;
};

void Campaign::Progress(const char* kind, int n, int of, const std::string& line) const {
  std::printf("[%6.1fs] %-11s %3d/%-3d %s; violations %llu\n",
              static_cast<double>(MsSince(start_)) / 1000.0, kind, n, of, line.c_str(),
              static_cast<unsigned long long>(Violations()));
  std::fflush(stdout);
}

bool Campaign::SigkillCycle(int n) {
  const std::string data_dir = work_ + "/dedupd";
  const std::string config = work_ + "/campaign.textproto";
  const std::vector<std::string> flags = {"--config=" + config, "--durability=fsync"};
  if (server_ == nullptr) {
    blackbox::WriteFile(config, CampaignConfig());
    absl::StatusOr<std::unique_ptr<blackbox::ServingDedupd>> started =
        blackbox::ServingDedupd::Start(work_, data_dir, flags);
    if (!started.ok()) {
      std::fprintf(stderr, "dedupd does not start: %s\n", started.status().ToString().c_str());
      return false;
    }
    server_ = *std::move(started);
  }
  GrpcTarget target(server_->channel());
  const int64_t load_ms = 100 + static_cast<int64_t>(rng_() % 500);
  MixedLoad load(&target, &sigkill_oracle_, absl::StrCat("k", n), kWorkers, rng_());
  std::this_thread::sleep_for(milliseconds(load_ms));
  const blackbox::ExitStatus killed = server_->process().Kill();
  load.Stop();
  load.Join();
  server_.reset();
  const LoadCounts counts = load.counts();
  sigkill_.load.Add(counts);
  sigkill_.fault_ms_total += load_ms;

  const SteadyClock::time_point restart = SteadyClock::now();
  absl::StatusOr<std::unique_ptr<blackbox::ServingDedupd>> restarted =
      blackbox::ServingDedupd::Start(work_, data_dir, flags);
  if (!restarted.ok()) {
    std::fprintf(stderr, "dedupd does not restart after SIGKILL: %s\n",
                 restarted.status().ToString().c_str());
    return false;
  }
  server_ = *std::move(restarted);
  const int64_t restart_ms = MsSince(restart);
  sigkill_.Recovered(restart_ms);

  GrpcTarget after(server_->channel());
  std::vector<std::string> check = load.acknowledged();
  const size_t this_cycle = check.size();
  std::vector<std::string> older = sigkill_oracle_.SampleAcknowledged(200, rng_);
  check.insert(check.end(), older.begin(), older.end());
  const size_t unanswered = ReadBack(&after, &sigkill_oracle_, check);
  sigkill_.read_back += check.size() - unanswered;
  sigkill_.unanswered_reads += unanswered;
  ++sigkill_.cycles;
  Progress(
      "sigkill", n, args_.sigkill,
      absl::StrCat(load_ms, " ms load: ", counts.answered, " answers (calls unary/batch/stream ",
                   Calls(counts), "), ", counts.completes_acknowledged, " completes acked; ",
                   blackbox::Describe(killed), " with ", counts.unanswered, " in flight; restart ",
                   restart_ms, " ms; read back ", this_cycle, "+", older.size(), ", unanswered ",
                   unanswered));
  return true;
}

bool Campaign::OpenFaultStore() {
  storage::StoreOptions options;
  options.path = work_ + "/fault";
  options.shards = 8;
  options.durability = storage::Durability::kFsync;
  options.token_block = 64;  // Ceilings are persisted during the load too.
  storage::SetRocksDbEnvForTesting(&options, fs_.second, args_.fault_rollback == "unsynced_fsync");
  absl::StatusOr<std::unique_ptr<storage::Store>> store = storage::Store::Open(options);
  if (!store.ok()) {
    std::fprintf(stderr, "store on the fault file system does not open: %s\n",
                 store.status().ToString().c_str());
    return false;
  }
  fault_store_ = *std::move(store);
  return true;
}

bool Campaign::PowerLossCycle(int n) {
  if (fault_store_ == nullptr && !OpenFaultStore()) return false;
  StoreTarget target(fault_store_.get());
  const int64_t load_ms = 20 + static_cast<int64_t>(rng_() % 300);
  MixedLoad load(&target, &fault_oracle_, absl::StrCat("p", n), kWorkers, rng_());
  std::this_thread::sleep_for(milliseconds(load_ms));
  fs_.first->PowerLoss();
  load.Stop();
  load.Join();
  fault_store_.reset();
  fs_.first->Restart();
  const LoadCounts counts = load.counts();
  power_.load.Add(counts);
  power_.fault_ms_total += load_ms;

  const SteadyClock::time_point reopen = SteadyClock::now();
  if (!OpenFaultStore()) return false;
  const int64_t reopen_ms = MsSince(reopen);
  power_.Recovered(reopen_ms);
  StoreTarget after(fault_store_.get());
  std::vector<std::string> check = load.acknowledged();
  const size_t this_cycle = check.size();
  std::vector<std::string> older = fault_oracle_.SampleAcknowledged(200, rng_);
  check.insert(check.end(), older.begin(), older.end());
  const size_t unanswered = ReadBack(&after, &fault_oracle_, check);
  power_.read_back += check.size() - unanswered;
  power_.unanswered_reads += unanswered;
  ++power_.cycles;
  Progress("power loss", n, args_.power_loss,
           absl::StrCat(load_ms, " ms load: ", counts.answered, " answers (calls ", Calls(counts),
                        "), ", counts.completes_acknowledged, " completes acked; power lost with ",
                        counts.unanswered, " in flight; reopen ", reopen_ms, " ms; read back ",
                        this_cycle, "+", older.size(), ", unanswered ", unanswered));
  return true;
}

bool Campaign::DiskFullEpisode(int n) {
  if (fault_store_ == nullptr && !OpenFaultStore()) return false;
  StoreTarget target(fault_store_.get());
  const uint64_t space = rng_() % (64 * 1024);
  MixedLoad load(&target, &fault_oracle_, absl::StrCat("d", n), kWorkers, rng_());
  AwaitProgress(load, 200, milliseconds(2'000));
  const SteadyClock::time_point full = SteadyClock::now();
  fs_.first->SetSpaceLeft(space);
  // Workers stop at their first refused write.
  while (load.running() > 0 && MsSince(full) < 3'000) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  const bool reached = load.running() == 0;
  load.Stop();
  load.Join();
  const LoadCounts counts = load.counts();
  disk_.load.Add(counts);
  if (!reached) ++disk_not_reached_;

  // While full: reads answer, writes do not.
  std::vector<std::string> check = fault_oracle_.SampleAcknowledged(50, rng_);
  const size_t unanswered_while_full = ReadBack(&target, &fault_oracle_, check);
  disk_.unanswered_reads += unanswered_while_full;
  storage::ClaimOp fresh;
  fresh.ns = Policies()[0].ns;
  fresh.key = absl::StrCat("d", n, "-after");
  fresh.owner = "after";
  fresh.lease_ms = 1000;
  fresh.max_attempts = 5;
  fresh.failed_retention_ms = kRetentionMs;
  const bool write_refused = !fault_store_->Apply(fresh).ok();
  const std::string error = fault_store_->BackgroundError().ToString();

  fs_.first->SetSpaceLeft(test::FaultInjectionFileSystem::kUnlimited);
  const SteadyClock::time_point resume = SteadyClock::now();
  bool resumed = false;
  while (!(resumed = fault_store_->Recover().ok()) && MsSince(resume) < 10'000) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  if (!resumed) {
    // RocksDB could not resume from this error: the store needs a restart.
    ++disk_reopened_;
    fault_store_.reset();
    if (!OpenFaultStore()) return false;
  }
  const int64_t resume_ms = MsSince(resume);
  disk_.Recovered(resume_ms);
  absl::StatusOr<storage::OpResult> after = fault_store_->Apply(fresh);
  const bool write_back = after.ok() && after->outcome == storage::Outcome::kAcquired;
  if (!write_back) {
    std::fprintf(
        stderr, "writes did not come back after space returned: %s\n",
        after.ok() ? storage::OutcomeName(after->outcome) : after.status().ToString().c_str());
    return false;
  }
  StoreTarget reopened(fault_store_.get());
  std::vector<std::string> acked = load.acknowledged();
  const size_t unanswered = ReadBack(&reopened, &fault_oracle_, acked);
  disk_.read_back += acked.size() + check.size() - unanswered - unanswered_while_full;
  disk_.unanswered_reads += unanswered;
  ++disk_.cycles;
  Progress("full disk", n, args_.disk_full,
           absl::StrCat(space, " bytes left: ", counts.answered, " answers, ",
                        counts.completes_acknowledged, " completes acked; ",
                        reached ? "filled" : "NOT filled in 3 s", "; while full: ", check.size(),
                        " reads, ", unanswered_while_full, " unanswered, fresh write ",
                        write_refused ? "refused" : "ACCEPTED", " (", error, "); ",
                        resumed ? "resumed in place" : "reopened", " after ", resume_ms,
                        " ms; read back ", acked.size(), ", unanswered ", unanswered));
  return true;
}

bool Campaign::OpenClockStore() {
  storage::StoreOptions options;
  options.path = work_ + "/clock";
  options.shards = 8;
  options.durability = storage::Durability::kBuffered;
  options.clock = &clock_;
  options.clock_step_tolerance_ms = kToleranceMs;
  options.clock_step_confirmation_ms = kConfirmationMs;
  if (args_.fault_rollback == "unprotected_clock") storage::SetUnprotectedClockForTesting(&options);
  absl::StatusOr<std::unique_ptr<storage::Store>> store = storage::Store::Open(options);
  if (!store.ok()) {
    std::fprintf(stderr, "clock store does not open: %s\n", store.status().ToString().c_str());
    return false;
  }
  clock_store_ = *std::move(store);
  return true;
}

bool Campaign::ClockStepCycle(int n) {
  if (clock_store_ == nullptr && !OpenClockStore()) return false;
  // True time: the wall clock without its steps, i.e. elapsed time.
  const auto true_ms = [&] { return clock_origin_ms_ + clock_.SteadyMs(); };
  std::vector<std::string> problems;
  const auto check_time = [&] {
    const int64_t now = clock_store_->NowMs();
    if (now < last_storage_ms_) {
      problems.push_back(
          absl::StrCat("storage time went back from ", last_storage_ms_, " to ", now));
    }
    if (now < true_ms()) {
      problems.push_back(absl::StrCat("storage time ", now, " behind elapsed time ", true_ms()));
    }
    max_lead_ms_ = std::max(max_lead_ms_, now - true_ms());
    last_storage_ms_ = std::max(last_storage_ms_, now);
  };
  StoreTarget target(clock_store_.get());
  auto load =
      std::make_unique<MixedLoad>(&target, &clock_oracle_, absl::StrCat("s", n), kWorkers, rng_(),
                                  /*pause_us=*/2'000);
  const auto pass = [&](int64_t ms, int64_t tick_ms) {
    for (int64_t passed = 0; passed < ms; passed += tick_ms) {
      clock_.AdvanceMs(tick_ms);
      AwaitProgress(*load, 8, milliseconds(1'000));
      check_time();
    }
  };
  const int64_t size = 2 * 60'000 + static_cast<int64_t>(rng_() % (3 * 3600'000));
  const int64_t step = rng_() % 2 == 0 ? size : -size;
  pass(5'000 + static_cast<int64_t>(rng_() % 20'000), 1'000);

  // A 5 min lease taken before the step must stay with its holder.
  const std::string probe = absl::StrCat("s", n, "-lease");
  storage::ClaimOp hold;
  hold.ns = Policies()[0].ns;
  hold.key = probe;
  hold.owner = "holder";
  hold.lease_ms = 5 * 60'000;
  hold.max_attempts = 5;
  hold.failed_retention_ms = kRetentionMs;
  const int64_t held_at = true_ms();
  absl::StatusOr<storage::OpResult> held = clock_store_->Apply(hold);
  if (!held.ok() || held->outcome != storage::Outcome::kAcquired) {
    problems.push_back("the probe lease was not acquired");
  }

  clock_.StepMs(step);
  check_time();
  if (!clock_store_->CompactAll().ok()) problems.push_back("compaction failed");
  const int64_t during_ms = 5'000 * (6 + static_cast<int64_t>(rng_() % 90));
  pass(during_ms, 5'000);
  storage::ClaimOp other = hold;
  other.owner = "other";
  if (true_ms() - held_at < hold.lease_ms - kToleranceMs) {
    ++probes_;
    absl::StatusOr<storage::OpResult> r = clock_store_->Apply(other);
    if (!r.ok() || r->outcome != storage::Outcome::kInProgress) {
      problems.push_back(absl::StrCat("a live lease (", (true_ms() - held_at) / 1000,
                                      " s of 300 s elapsed) was taken over during a ",
                                      step / 60'000, " min step"));
    }
  }
  if (!clock_store_->CompactAll().ok()) problems.push_back("compaction failed");
  clock_.StepMs(-step);
  check_time();
  pass(10'000, 1'000);
  if (!clock_store_->CompactAll().ok()) problems.push_back("compaction failed");
  const uint64_t dropped = clock_store_->compaction_drops().completed.load();
  if (dropped > 0) {
    problems.push_back(absl::StrCat(dropped, " COMPLETED records dropped within retention"));
  }
  load->Stop();
  load->Join();
  const LoadCounts counts = load->counts();
  steps_.load.Add(counts);
  load.reset();

  std::string restart = "";
  if (n % 4 == 0) {
    // A restart across a backward step: time resumes at the mark.
    const int64_t before = clock_store_->NowMs();
    clock_store_.reset();
    const int64_t back = 60'000 + static_cast<int64_t>(rng_() % 3600'000);
    clock_.StepMs(-back);
    if (!OpenClockStore()) return false;
    check_time();
    if (clock_store_->NowMs() < before) problems.push_back("time went back across a restart");
    clock_.StepMs(back);
    ++clock_restarts_;
    restart = absl::StrCat("; restarted with the wall clock ", back / 60'000, " min back");
  }
  StoreTarget after(clock_store_.get());
  std::vector<std::string> acked = counts.completes_acknowledged > 0
                                       ? clock_oracle_.SampleAcknowledged(200, rng_)
                                       : std::vector<std::string>{};
  const size_t unanswered = ReadBack(&after, &clock_oracle_, acked);
  steps_.read_back += acked.size() - unanswered;
  steps_.unanswered_reads += unanswered;
  ++steps_.cycles;
  for (const std::string& p : problems) std::printf("  clock problem: %s\n", p.c_str());
  clock_problems_ += problems.size();
  Progress("clock steps", n, args_.clock_steps,
           absl::StrCat("step ", step / 60'000, " min for ", during_ms / 1000,
                        " s: ", counts.answered, " answers, ", counts.completes_acknowledged,
                        " completes acked, COMPLETED dropped ", dropped,
                        "; lead of storage "
                        "time over elapsed time so far at most ",
                        max_lead_ms_, " ms", restart, "; read back ", acked.size(),
                        ", clock problems ", problems.size()));
  return true;
}

void Campaign::PrintTable() const {
  std::printf("\n%-12s %7s %12s %10s %10s %10s %12s %13s\n", "kind", "cycles", "answers", "acked",
              "read back", "unread", "recovery ms", "recovery max");
  const auto row = [](const char* kind, const Figures& f) {
    std::printf("%-12s %7d %12llu %10llu %10llu %10llu %12lld %13lld\n", kind, f.cycles,
                static_cast<unsigned long long>(f.load.answered),
                static_cast<unsigned long long>(f.load.completes_acknowledged),
                static_cast<unsigned long long>(f.read_back),
                static_cast<unsigned long long>(f.unanswered_reads),
                static_cast<long long>(f.cycles > 0 ? f.recovery_ms_total / f.cycles : 0),
                static_cast<long long>(f.recovery_ms_max));
  };
  row("sigkill", sigkill_);
  row("power loss", power_);
  row("full disk", disk_);
  row("clock steps", steps_);
  LoadCounts all;
  for (const Figures* f : {&sigkill_, &power_, &disk_, &steps_}) all.Add(f->load);
  std::printf(
      "\nmix: calls unary/batch/stream %s; %llu ACQUIRED, %llu releases, %llu extends, %llu "
      "redeliveries of completed keys, %llu retries of unfinished keys; %llu operations in "
      "flight at a fault\n",
      Calls(all).c_str(), static_cast<unsigned long long>(all.acquired),
      static_cast<unsigned long long>(all.releases), static_cast<unsigned long long>(all.extends),
      static_cast<unsigned long long>(all.redeliveries),
      static_cast<unsigned long long>(all.retries),
      static_cast<unsigned long long>(all.unanswered));
  std::printf(
      "full disk: %d episodes not filled within 3 s, %d needed a reopen; clock: %d restarts "
      "across a backward step, %d live-lease probes, storage time at most %lld ms ahead of "
      "elapsed time, %llu clock problems\n",
      disk_not_reached_, disk_reopened_, clock_restarts_, probes_,
      static_cast<long long>(max_lead_ms_), static_cast<unsigned long long>(clock_problems_));
  std::printf("\n%-12s %10s %12s %16s %10s\n", "oracle", "keys", "ACQUIRED", "COMPLETED checked",
              "violations");
  const auto oracle_row = [](const char* name, const ExpectedState& oracle) {
    const ExpectedState::Totals t = oracle.totals();
    std::printf("%-12s %10llu %12llu %16llu %10llu\n", name,
                static_cast<unsigned long long>(t.keys),
                static_cast<unsigned long long>(t.acquired),
                static_cast<unsigned long long>(t.completed_answers_checked),
                static_cast<unsigned long long>(t.violations));
  };
  oracle_row("dedupd", sigkill_oracle_);
  oracle_row("fault store", fault_oracle_);
  oracle_row("clock store", clock_oracle_);
  for (const ExpectedState* oracle : {&sigkill_oracle_, &fault_oracle_, &clock_oracle_}) {
    const std::vector<std::string> v = oracle->Violations();
    for (size_t i = 0; i < v.size() && i < 20; ++i) std::printf("VIOLATION %s\n", v[i].c_str());
  }
  std::printf("\ntotal %.1f s, seed %llu%s\n", static_cast<double>(MsSince(start_)) / 1000.0,
              static_cast<unsigned long long>(args_.seed),
              args_.fault_rollback.empty()
                  ? ""
                  : absl::StrCat(", BROKEN STORE: ", args_.fault_rollback).c_str());
}

int Campaign::Run() {
  int sigkill = 0, power = 0, disk = 0, steps = 0;
  bool ok = true;
  const auto time_left = [&] {
    return args_.duration_s <= 0 || MsSince(start_) < args_.duration_s * 1000;
  };
  // Interleaved: after round r of `most`, each kind has done about r/most
  // of its cycles, so a time bound cuts every kind short alike.
  const int most =
      std::max({args_.sigkill, args_.power_loss, args_.disk_full, args_.clock_steps, 1});
  const auto due = [&](int done, int total, int round) {
    return ok && time_left() && done < total &&
           static_cast<int64_t>(done) * most < static_cast<int64_t>(round) * total;
  };
  for (int round = 1; ok && time_left() && round <= most; ++round) {
    while (due(sigkill, args_.sigkill, round)) ok = SigkillCycle(++sigkill);
    while (due(power, args_.power_loss, round)) ok = PowerLossCycle(++power);
    while (due(disk, args_.disk_full, round)) ok = DiskFullEpisode(++disk);
    while (due(steps, args_.clock_steps, round)) ok = ClockStepCycle(++steps);
  }
  if (server_ != nullptr) {
    (void)server_->process().Terminate(milliseconds(15'000));
    server_.reset();
  }
  fault_store_.reset();
  clock_store_.reset();
  PrintTable();
  if (!ok) {
    std::printf("campaign stopped: a cycle could not run (see above)\n");
    return 1;
  }
  return Violations() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dedup::campaign

int main(int argc, char** argv) {
  dedup::campaign::Args args;
  if (!dedup::campaign::ParseArgs(argc, argv, &args)) return 2;
  std::unique_ptr<dedup::test::TempDir> temp;
  std::string work = args.work_dir;
  if (work.empty()) {
    temp = std::make_unique<dedup::test::TempDir>();
    work = temp->path();
  }
  std::printf(
      "dedup_campaign: sigkill %d, power loss %d, full disk %d, clock steps %d, "
      "duration %lld s, seed %llu, work dir %s\n",
      args.sigkill, args.power_loss, args.disk_full, args.clock_steps,
      static_cast<long long>(args.duration_s), static_cast<unsigned long long>(args.seed),
      work.c_str());
  dedup::campaign::Campaign campaign(args, work);
  return campaign.Run();
}
