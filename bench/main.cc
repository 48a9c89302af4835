// dedup_bench: drives dedupd, Redis or PostgreSQL with one deduplication
// workload and reports throughput, latency and server cost. See --help and
// bench/README.md.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dedupd_driver.h"
#include "dedupd_process.h"
#include "load_runner.h"
#include "process_stats.h"
#include "report.h"
#include "workload.h"
#ifdef DEDUP_BENCH_HAVE_REDIS
#include "redis_driver.h"
#endif
#ifdef DEDUP_BENCH_HAVE_POSTGRES
#include "postgres_driver.h"
#endif

ABSL_FLAG(std::string, system, "dedupd", "dedupd, redis or postgres.");
ABSL_FLAG(std::string, target, "",
          "HOST:PORT of the server (default: the system's usual port on 127.0.0.1).");
ABSL_FLAG(
    std::string, spawn_dedupd, "",
    "Start this dedupd binary on 127.0.0.1 port 0 with a temp data dir, run against it, stop it.");
ABSL_FLAG(std::vector<std::string>, spawn_flags, {},
          "Extra flags for --spawn_dedupd, comma-separated.");
ABSL_FLAG(std::string, dedupd_api, "auto", "client, unary, batch or auto.");
ABSL_FLAG(std::string, bearer_token_file, "",
          "dedupd with --dedupd_api=batch: send the first line of this file as "
          "'authorization: Bearer TOKEN' on every Batch, as one identity of a server "
          "with grants (plaintext is allowed on loopback).");
ABSL_FLAG(int, batch_window_us, 200, "Client library coalescing window (dedupd_api=client).");
ABSL_FLAG(int, max_batch, 64, "Client library largest coalesced batch (dedupd_api=client).");
ABSL_FLAG(int, max_batches_in_flight, 4,
          "Client library batches in the air before calls wait to coalesce (dedupd_api=client).");
ABSL_FLAG(int, completed_cache, 0,
          "Client library cache of COMPLETED answers, in entries (0: off; dedupd_api client "
          "or unary).");
ABSL_FLAG(int, callers, 64, "Concurrent callers, each one request in flight.");
ABSL_FLAG(int, batch, 1, "Claims per request.");
ABSL_FLAG(int, async_in_flight, 0,
          "Asynchronous mode: keep N claims in flight in total through the client library's "
          "ClaimAsync (dedupd, --batch=1) instead of --callers blocking threads; 0: blocking.");
ABSL_FLAG(int, async_threads, 1,
          "Asynchronous mode: threads submitting the --async_in_flight claims (1..N).");
ABSL_FLAG(double, duplicates, 0.0, "Fraction of claims (0..1) that repeat a recent key.");
ABSL_FLAG(uint64_t, recent_window, 10000, "How many of the newest keys a duplicate is drawn from.");
ABSL_FLAG(uint64_t, lease_ms, 60000, "Lease of each claim (Redis: EX in seconds, rounded up).");
ABSL_FLAG(bool, complete, false, "dedupd only: Complete each acquired key.");
ABSL_FLAG(uint64_t, retention_ms, 0, "Retention of each Complete (0: the namespace default).");
ABSL_FLAG(uint32_t, result_bytes, 16, "Bytes of the result each Complete stores.");
ABSL_FLAG(std::string, ns, "bench", "dedupd namespace; PostgreSQL table claims_<ns>.");
ABSL_FLAG(std::string, key_prefix, "", "Prefix of every key (default: unique per run).");
ABSL_FLAG(double, warmup, 1.0, "Seconds of load before measuring.");
ABSL_FLAG(double, duration, 10.0, "Seconds measured (upper bound).");
ABSL_FLAG(uint64_t, max_claims, 10000000, "Claims measured (upper bound; 0: none).");
ABSL_FLAG(double, rate, 0.0, "Target claims/s over all callers (0: as fast as possible).");
ABSL_FLAG(int, server_pid, 0, "Server process whose CPU (and RSS) is measured.");
ABSL_FLAG(std::string, data_dir, "", "Server data directory to measure with du after the run.");
ABSL_FLAG(std::string, pg_user, "postgres", "PostgreSQL user.");
ABSL_FLAG(std::string, pg_database, "postgres", "PostgreSQL database.");
ABSL_FLAG(std::string, pg_synchronous_commit, "on", "on or off, set per session.");
ABSL_FLAG(std::string, variant, "", "Label of the server configuration (e.g. fsync, everysec).");
ABSL_FLAG(std::string, label, "", "Label of this run, copied into the JSON.");
ABSL_FLAG(std::string, json_out, "", "Write the JSON result here ('-': stdout, table to stderr).");
ABSL_FLAG(bool, progress, true, "Print a progress line on stderr every second.");
ABSL_FLAG(double, max_error_ratio, 0.01, "Exit 1 when more than this fraction of claims failed.");

namespace {

using namespace dedup::bench;  // NOLINT: a main file.

constexpr char kUsage[] = R"(a load generator for dedupd and its peers.

C callers (threads) each keep one request of B claims in flight against one
system, first for a warm-up, then for a bounded time and claim count, and the
run reports claims/s, p50/p99/p99.9 latency, the server's CPU seconds per
million claims (from /proc/<pid>/stat), and optionally its RSS and data size.

Usage:
  dedup_bench --system=dedupd --target=127.0.0.1:7400 [workload flags]
  dedup_bench --spawn_dedupd=build/server/dedupd --duration=2     (self-contained)
  dedup_bench --system=redis --target=127.0.0.1:6379 --server_pid=PID
  dedup_bench --system=postgres --target=127.0.0.1:5432 --pg_synchronous_commit=off

Systems:
  dedupd    Claim(namespace, key, owner, lease). --dedupd_api: client (the C++
            client library; concurrent calls coalesce onto Stream batches),
            unary (client library, one RPC per claim), batch (a Batch RPC of
            B claims per request); auto = client for B=1, batch for B>1.
  redis     SET key owner NX EX ceil(lease/1000); B>1 pipelines B commands.
  postgres  INSERT ... ON CONFLICT (k) DO NOTHING into claims_<namespace>
            (k text primary key); B>1 is one INSERT of B rows.

Asynchronous mode (dedupd through its client library, --batch=1 only):
  --async_in_flight=N (0: off) has --async_threads=T (default 1) threads keep
  N claims in flight in total through ClaimAsync, each Complete (--complete)
  sent from its claim's callback, instead of --callers threads blocking on
  one call each: the server is then not limited by the load generator's
  threads. Latency runs from submission (or, with --rate, from when the claim
  was due) to the last callback, as a blocking call's does; --callers does
  not apply. The run waits for every claim in flight before it reports.

Workload flags:
  --callers=64 --batch=1 --duplicates=0.5 (fraction repeating one of the
  --recent_window newest keys) --lease_ms --complete --retention_ms --result_bytes
  --warmup=1 --duration=10 --max_claims=10000000 --rate=0 (claims/s; with a
  rate, latency counts from when each request was due)

Output: a table on stdout and, with --json_out=FILE, one JSON object.
Exit codes: 0 ok; 1 no throughput, too many errors, the server unreachable,
or an unknown flag or --help (Abseil's flag parser exits 1); 2 a flag value
out of range; 3 the run overran its bounds by 60 s.

Flags:
)";

std::string DefaultPort(const std::string& system) {
  if (system == "redis") return "6379";
  if (system == "postgres") return "5432";
  return "7400";
}

bool SplitTarget(const std::string& target, std::string* host, int* port) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos) return false;
  *host = target.substr(0, colon);
  return absl::SimpleAtoi(target.substr(colon + 1), port) && *port > 0;
}

absl::StatusOr<dedup::bench::Workload> WorkloadFromFlags() {
  Workload w;
  w.callers = absl::GetFlag(FLAGS_callers);
  w.async_in_flight = absl::GetFlag(FLAGS_async_in_flight);
  w.async_threads = absl::GetFlag(FLAGS_async_threads);
  w.batch = absl::GetFlag(FLAGS_batch);
  w.duplicate_ratio = absl::GetFlag(FLAGS_duplicates);
  w.recent_window = absl::GetFlag(FLAGS_recent_window);
  w.lease_ms = absl::GetFlag(FLAGS_lease_ms);
  w.complete = absl::GetFlag(FLAGS_complete);
  w.retention_ms = absl::GetFlag(FLAGS_retention_ms);
  w.result_bytes = absl::GetFlag(FLAGS_result_bytes);
  w.ns = absl::GetFlag(FLAGS_ns);
  w.key_prefix = absl::GetFlag(FLAGS_key_prefix);
  if (w.key_prefix.empty()) {
    w.key_prefix =
        absl::StrCat("r", absl::Hex(static_cast<uint64_t>(std::time(nullptr))), "-", getpid(), "-");
  }
  w.warmup_seconds = absl::GetFlag(FLAGS_warmup);
  w.duration_seconds = absl::GetFlag(FLAGS_duration);
  w.max_claims = absl::GetFlag(FLAGS_max_claims);
  w.rate = absl::GetFlag(FLAGS_rate);
  if (w.callers < 1 || w.callers > 4096) return absl::InvalidArgumentError("--callers: 1..4096");
  if (w.batch < 1 || w.batch > 1000) return absl::InvalidArgumentError("--batch: 1..1000");
  if (w.async_in_flight < 0 || w.async_in_flight > 65536) {
    return absl::InvalidArgumentError("--async_in_flight: 0..65536");
  }
  if (w.async_in_flight > 0 &&
      (w.async_threads < 1 || w.async_threads > 64 || w.async_threads > w.async_in_flight)) {
    return absl::InvalidArgumentError("--async_threads: 1..64 and at most --async_in_flight");
  }
  if (w.duplicate_ratio < 0 || w.duplicate_ratio > 1) {
    return absl::InvalidArgumentError("--duplicates: a fraction 0..1");
  }
  if (w.lease_ms == 0) return absl::InvalidArgumentError("--lease_ms: at least 1");
  if (w.warmup_seconds < 0 || w.duration_seconds <= 0 || w.duration_seconds > 86400) {
    return absl::InvalidArgumentError("--warmup >= 0 and 0 < --duration <= 86400");
  }
  if (w.rate < 0) return absl::InvalidArgumentError("--rate: 0 or more");
  return w;
}

// The asynchronous mode drives the client library's callback API, which
// only dedupd has, one claim per call.
absl::Status CheckAsyncMode(const std::string& system, const Workload& workload) {
  if (workload.async_in_flight == 0) return absl::OkStatus();
  const std::string api = absl::GetFlag(FLAGS_dedupd_api);
  if (system == "dedupd" && workload.batch == 1 &&
      (api == "auto" || api == "client" || api == "unary")) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--async_in_flight needs --system=dedupd, --batch=1 and --dedupd_api=client, unary or "
      "auto (the client library's ClaimAsync); got --system=",
      system, " --batch=", workload.batch, " --dedupd_api=", api));
}

absl::StatusOr<std::unique_ptr<Driver>> MakeDriver(const std::string& system,
                                                   const std::string& target,
                                                   const Workload& workload) {
  std::string host;
  int port = 0;
  if (!SplitTarget(target, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--target: HOST:PORT, got '", target, "'"));
  }
  if (system == "dedupd") {
    DedupdDriverOptions options;
    options.target = target;
    const std::string api = absl::GetFlag(FLAGS_dedupd_api);
    if (api == "client" || (api == "auto" && workload.batch == 1)) {
      options.api = DedupdApi::kClient;
    } else if (api == "batch" || api == "auto") {
      options.api = DedupdApi::kBatch;
    } else if (api == "unary") {
      options.api = DedupdApi::kUnary;
    } else {
      return absl::InvalidArgumentError("--dedupd_api: client, unary, batch or auto");
    }
    options.batch_window = absl::Microseconds(absl::GetFlag(FLAGS_batch_window_us));
    options.max_batch = absl::GetFlag(FLAGS_max_batch);
    options.max_batches_in_flight = absl::GetFlag(FLAGS_max_batches_in_flight);
    options.completed_cache_entries = absl::GetFlag(FLAGS_completed_cache);
    if (options.completed_cache_entries < 0) {
      return absl::InvalidArgumentError("--completed_cache: entries, 0 (off) or more");
    }
    if (options.completed_cache_entries > 0 && options.api == DedupdApi::kBatch) {
      return absl::InvalidArgumentError(
          "--completed_cache: the client library's cache; Batch requests (--batch above 1) do "
          "not go through it");
    }
    if (const std::string path = absl::GetFlag(FLAGS_bearer_token_file); !path.empty()) {
      if (options.api != DedupdApi::kBatch) {
        return absl::InvalidArgumentError(
            "--bearer_token_file: with --dedupd_api=batch only (the client library sends "
            "tokens over TLS)");
      }
      std::ifstream file(path);
      std::getline(file, options.bearer_token);
      if (options.bearer_token.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--bearer_token_file: cannot read a token from the first line of ", path));
      }
    }
    return MakeDedupdDriver(options, workload);
  }
  if (system == "redis") {
#ifdef DEDUP_BENCH_HAVE_REDIS
    RedisDriverOptions options;
    options.host = host;
    options.port = port;
    return MakeRedisDriver(options, workload);
#else
    return absl::UnimplementedError("built without hiredis (install libhiredis-dev, rebuild)");
#endif
  }
  if (system == "postgres") {
#ifdef DEDUP_BENCH_HAVE_POSTGRES
    PostgresDriverOptions options;
    options.conninfo =
        absl::StrCat("host=", host, " port=", port, " user=", absl::GetFlag(FLAGS_pg_user),
                     " dbname=", absl::GetFlag(FLAGS_pg_database),
                     " connect_timeout=10 options=-cclient_min_messages=warning");
    options.synchronous_commit = absl::GetFlag(FLAGS_pg_synchronous_commit);
    return MakePostgresDriver(options, workload);
#else
    return absl::UnimplementedError("built without libpq (install libpq-dev, rebuild)");
#endif
  }
  return absl::InvalidArgumentError("--system: dedupd, redis or postgres");
}

int Fail(const absl::Status& status, int code) {
  std::cerr << "dedup_bench: " << status.message() << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  // --help lists this file's flags (absl otherwise matches the file name
  // against the program name).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "bench/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::cerr << "dedup_bench: unexpected argument '" << rest[1] << "' (see --help)\n";
    return 2;
  }
  absl::StatusOr<Workload> workload = WorkloadFromFlags();
  if (!workload.ok()) return Fail(workload.status(), 2);

  RunContext context;
  context.system = absl::GetFlag(FLAGS_system);
  if (absl::Status s = CheckAsyncMode(context.system, *workload); !s.ok()) return Fail(s, 2);
  context.variant = absl::GetFlag(FLAGS_variant);
  context.label = absl::GetFlag(FLAGS_label);
  context.server_pid = absl::GetFlag(FLAGS_server_pid);
  context.data_dir = absl::GetFlag(FLAGS_data_dir);
  std::string target = absl::GetFlag(FLAGS_target);
  if (target.empty()) target = "127.0.0.1:" + DefaultPort(context.system);

  std::unique_ptr<DedupdProcess> spawned;
  if (const std::string binary = absl::GetFlag(FLAGS_spawn_dedupd); !binary.empty()) {
    if (context.system != "dedupd") {
      return Fail(absl::InvalidArgumentError("--spawn_dedupd needs --system=dedupd"), 2);
    }
    absl::StatusOr<std::unique_ptr<DedupdProcess>> process =
        DedupdProcess::Start(binary, absl::GetFlag(FLAGS_spawn_flags));
    if (!process.ok()) return Fail(process.status(), 1);
    spawned = *std::move(process);
    target = spawned->target();
    context.server_pid = spawned->pid();
    context.data_dir = spawned->data_dir();
  }

  absl::StatusOr<std::unique_ptr<Driver>> driver = MakeDriver(context.system, target, *workload);
  if (!driver.ok()) return Fail(driver.status(), 2);
  context.description = (*driver)->Describe();

  RunnerOptions options;
  options.server_pid = context.server_pid;
  options.server_descendants = context.system == "postgres";
  options.progress = absl::GetFlag(FLAGS_progress);
  options.label = context.label.empty() ? context.system : context.label;
  absl::StatusOr<RunResult> result = RunLoad(**driver, *workload, options);
  if (!result.ok()) return Fail(result.status(), 1);
  driver->reset();

  if (context.server_pid > 0) context.server_rss_bytes = ResidentBytes(context.server_pid);
  if (!context.data_dir.empty()) context.data_bytes = DiskBytes(context.data_dir);

  const std::string json = ToJson(context, *workload, *result);
  const std::string table = ToTable(context, *workload, *result);
  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (json_out == "-") {
    std::cout << json << "\n";
    std::cerr << table;
  } else {
    std::cout << table;
    if (!json_out.empty()) {
      std::ofstream file(json_out);
      file << json << "\n";
      if (!file.good()) return Fail(absl::UnavailableError("cannot write " + json_out), 1);
    }
  }
  if (result->throughput() <= 0) {
    return Fail(absl::UnavailableError("no claim was answered: throughput 0"), 1);
  }
  const double error_ratio = static_cast<double>(result->errors) / result->claims;
  if (error_ratio > absl::GetFlag(FLAGS_max_error_ratio)) {
    return Fail(absl::UnavailableError(
                    absl::StrCat(result->errors, " of ", result->claims, " claims failed")),
                1);
  }
  return 0;
}
