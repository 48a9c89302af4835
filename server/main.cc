// dedupd: the deduplication server. See README.md and --help.
#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/build_info.h"
#include "server/connection_gate.h"
#include "server/dedup_server.h"
#include "server/logging.h"
#include "server/memory_release.h"
#include "server/server_settings.h"
#include "spdlog/spdlog.h"

#ifdef DEDUP_WITH_JEMALLOC
#include <jemalloc/jemalloc.h>

// jemalloc's options at start-up; MALLOC_CONF in the environment overrides
// them. muzzy_decay_ms:-1: memory left free for the dirty decay (10 s) is
// given back to the kernel lazily (MADV_FREE), which takes it only when it
// needs memory, and never with MADV_DONTNEED, which unmaps it at once. A
// memtable freed at its flush is mostly reallocated for the next memtables
// after that decay; unmapped, each of its pages would fault in again on the
// first write, which in a steady state took 3 to 4% of the server's CPU
// (bench/RESULTS.md, "Page faults in a steady state"). Lazily freed pages
// still count in the resident size until the kernel takes them.
const char* malloc_conf = "muzzy_decay_ms:-1";
#endif

ABSL_FLAG(std::string, config, "",
          "Configuration file in protobuf text format (see "
          "deploy/dedupd.textproto). Flags below override the fields they name.");
ABSL_FLAG(std::string, listen, "", "gRPC listen address [config: listen; default 127.0.0.1:7400].");
ABSL_FLAG(std::string, data_dir, "",
          "Data directory, created if missing [config: data_dir; default ./dedupd-data].");
ABSL_FLAG(uint32_t, shards, 0,
          "Shards of a new data directory; an existing one keeps its count and a "
          "different value is refused [config: shards; default 16, or in a replicated "
          "cluster the cluster's count: 1024 for a new cluster].");
ABSL_FLAG(std::string, durability, "",
          "fsync (reply after the WAL is synced) or buffered (WAL synced in the "
          "background) [config: durability; default fsync].");
ABSL_FLAG(bool, strict, false,
          "Refuse namespaces that the config does not declare (NOT_FOUND) "
          "[config: strict_namespaces].");
ABSL_FLAG(uint32_t, workers, 0, "Storage worker threads [config: workers; default 32].");
ABSL_FLAG(std::string, execution, "",
          "Where storage work runs: auto (inline), workers or inline (on gRPC's thread; "
          "with fsync the WAL or log syncs in groups; replicated: for Stream batches) "
          "[config: execution; default auto].");
ABSL_FLAG(uint32_t, max_key_bytes, 0, "Longest key in bytes [config: max_key_bytes; default 512].");
ABSL_FLAG(std::string, metrics_listen, "",
          "HTTP address of /metrics, /healthz and /readyz, or off [config: metrics_listen; "
          "default 127.0.0.1:7401].");
ABSL_FLAG(std::string, probe_listen, "",
          "HTTP address of /healthz and /readyz on threads of their own, apart from slow "
          "/metrics clients, or off [config: probe_listen; default off].");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the gRPC server [config: tls.cert].");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert [config: tls.key].");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle; clients must present a certificate it verifies (mutual TLS) "
          "[config: tls.ca].");
ABSL_FLAG(bool, insecure, false,
          "Allow plaintext gRPC on a non-loopback --listen address [config: insecure].");
ABSL_FLAG(std::vector<std::string>, cluster_nodes, {},
          "Addresses of every node of the cluster, comma-separated, in index order "
          "[config: cluster.nodes]. Unset: a single node.");
ABSL_FLAG(int32_t, node_index, -1,
          "This node's index in --cluster_nodes [config: cluster.node_index].");
ABSL_FLAG(uint32_t, replication_factor, 0,
          "Copies of each shard; above 1 the cluster is replicated and keeps its leaders in "
          "etcd [config: cluster.replication_factor; default 1].");
ABSL_FLAG(std::vector<std::string>, etcd_endpoints, {},
          "host:port of etcd's client API, comma-separated [config: cluster.etcd_endpoints].");
ABSL_FLAG(std::string, cluster_name, "",
          "Names the cluster's keys in etcd [config: cluster.name; default \"default\"].");
ABSL_FLAG(std::string, leader_lease, "",
          "TTL of a shard leader's etcd lease [config: cluster.leader_lease; default 3s].");
ABSL_FLAG(uint64_t, move_bytes_per_second, 0,
          "Bytes per second a node sends the targets of the shard moves it leads, all together "
          "[config: cluster.move_bytes_per_second; default 32 MiB/s].");
ABSL_FLAG(std::string, zone, "",
          "This node's zone (failure domain), e.g. eu-west-1a: replicas of a shard go to "
          "distinct zones [config: cluster.zone].");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off.");
ABSL_FLAG(std::string, log_format, "text",
          "text (one readable line per event) or json (one JSON object per line).");
ABSL_FLAG(bool, log_keys, false,
          "Log keys in clear (escaped) beside their hash. Off by default: keys can carry "
          "customer ids.");
ABSL_FLAG(std::string, port_file, "",
          "After binding, write the gRPC port to this file (useful with port 0).");
ABSL_FLAG(bool, check_config, false, "Validate the configuration, print it and exit.");

namespace {

using dedup::server::ConfigureLogging;
using dedup::server::LogEvent;
using dedup::server::LogField;
using dedup::server::LogFormat;
using dedup::server::ParseLogFormat;
using dedup::v1::ServerConfig;

constexpr char kUsage[] =
    R"(dedupd: a networked deduplication server (gRPC dedup.v1.Dedup).

Consumers Claim a key before a side effect, Complete it with the result
afterwards, and every duplicate delivery gets the stored result instead of
running again. State lives in RocksDB under --data_dir.

Usage:
  dedupd [--config=FILE] [--listen=HOST:PORT] [--data_dir=DIR] [flags]

Flags (each overrides the config field in brackets):
  --config=FILE         configuration in protobuf text format; see
                        deploy/dedupd.textproto and proto/dedup/v1/server_config.proto
  --listen=HOST:PORT    gRPC address [listen; default 127.0.0.1:7400]
  --data_dir=DIR        data directory, created if missing [data_dir; default ./dedupd-data]
  --metrics_listen=ADDR /metrics, /healthz, /readyz over HTTP, or off
                        [metrics_listen; default 127.0.0.1:7401]
  --probe_listen=ADDR   /healthz and /readyz only, on threads of their own, so
                        slow /metrics clients cannot delay them, or off
                        [probe_listen; default off]
  --shards=N            shards of a new data directory; an existing one keeps its
                        count and another value is refused [shards; default 16;
                        replicated: the cluster's count, 1024 for a new cluster]
  --durability=MODE     fsync: reply after the WAL is synced; buffered: WAL synced
                        in the background [durability; default fsync]
  --strict              undeclared namespaces get NOT_FOUND [strict_namespaces]
  --tls_cert=FILE       PEM certificate chain of the gRPC server [tls.cert]
  --tls_key=FILE        its PEM private key [tls.key]
  --tls_ca=FILE         CA bundle client certificates must chain to: mutual TLS
                        [tls.ca]. The files are re-read when they change.
  --insecure            allow plaintext gRPC on a non-loopback address
                        [insecure]; without TLS, plaintext is refused there
  --cluster_nodes=A,B,C addresses of every node of a cluster, in index order; node i
                        of n owns the shards s with s mod n == i [cluster.nodes]
  --node_index=N        this node's index in --cluster_nodes [cluster.node_index]
  --replication_factor=R  copies of each shard; above 1, shard s starts on nodes
                        s..s+R-1 (mod n) and moves as etcd's placement says,
                        one replica leads it, and a majority holds every
                        acknowledged write [cluster.replication_factor]
  --etcd_endpoints=H:P,...  etcd (v3) holding a replicated cluster's leaders
                        [cluster.etcd_endpoints]
  --cluster_name=NAME   the cluster's key prefix in etcd [cluster.name]
  --leader_lease=DUR    how long a dead leader's shards wait before another
                        replica takes over [cluster.leader_lease; default 3s]
  --move_bytes_per_second=N  pace of what a node copies for all the shard
                        moves it leads, so that serving traffic keeps its p99
                        [cluster.move_bytes_per_second;
                        default 33554432]
  --zone=NAME           this node's zone (an availability zone, a rack): a
                        new cluster puts each shard's replicas in distinct
                        zones when there are enough, and rebalancing keeps
                        that [cluster.zone]
  --workers=N           storage worker threads [workers; default 32]
  --execution=MODE      where a call's storage work runs: workers (the pool),
                        inline (the gRPC thread that received it, saving a
                        hand-off; with fsync the store's WAL, or a
                        replicated node's log, is synced in groups by a
                        thread of its own; replicated: Stream batches
                        only), or auto, the same as inline [execution]
  --max_key_bytes=N     longest key [max_key_bytes; default 512]
  --log_level=LEVEL     trace, debug, info, warn, error or off (default info)
  --log_format=FORMAT   text, or json: one object per line with time, level,
                        message and fields such as namespace, shard, key_hash
  --log_keys            also log keys in clear (escaped); by default a key is
                        logged only as key_hash, since keys can carry customer ids
  --port_file=FILE      after binding, write the gRPC port here (for --listen=...:0)
  --check_config        validate the configuration, print a summary and exit
  --version             print the version and exit
  --help                this text

Examples:
  dedupd --data_dir=/var/lib/dedupd
  dedupd --config=/etc/dedupd/dedupd.textproto --listen=0.0.0.0:7400
  dedupd --config=dedupd.textproto --check_config

Signals: SIGTERM or SIGINT drain in-flight calls, sync the WAL and exit 0.
Exit codes: 0 clean shutdown, 2 bad flags or config, 1 cannot start.
)";

// absl's parser exits 1 on --help and on a bad flag; dedupd promises 0 for
// help and 2 for bad flags, so the command line is checked first. Returns
// the exit code to leave with, if any.
std::optional<int> CheckCommandLine(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      std::cerr << "dedupd: unexpected argument '" << arg << "' (see --help)\n";
      return 2;
    }
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    if (name == "version" || name == "helpfull" || name == "helpshort") continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && eq == absl::string_view::npos) {
        continue;
      }
    }
    if (flag == nullptr) {
      std::cerr << "dedupd: unknown flag --" << name << " (see --help)\n";
      return 2;
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::cerr << "dedupd: --" << name << " needs a value (see --help)\n";
      return 2;
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::cerr << "dedupd: --" << name << ": " << error << "\n";
      return 2;
    }
  }
  return std::nullopt;
}

// The config file, with flags that were given laid over it.
absl::StatusOr<ServerConfig> LoadConfig() {
  ServerConfig config;
  const std::string path = absl::GetFlag(FLAGS_config);
  if (!path.empty()) {
    absl::StatusOr<ServerConfig> parsed = dedup::server::ParseConfigFile(path);
    if (!parsed.ok()) return parsed.status();
    config = *parsed;
  }
  if (!absl::GetFlag(FLAGS_listen).empty()) config.set_listen(absl::GetFlag(FLAGS_listen));
  if (!absl::GetFlag(FLAGS_data_dir).empty()) config.set_data_dir(absl::GetFlag(FLAGS_data_dir));
  if (!absl::GetFlag(FLAGS_metrics_listen).empty()) {
    config.set_metrics_listen(absl::GetFlag(FLAGS_metrics_listen));
  }
  if (!absl::GetFlag(FLAGS_probe_listen).empty()) {
    config.set_probe_listen(absl::GetFlag(FLAGS_probe_listen));
  }
  if (absl::GetFlag(FLAGS_shards) != 0) config.set_shards(absl::GetFlag(FLAGS_shards));
  if (!absl::GetFlag(FLAGS_durability).empty()) {
    config.set_durability(absl::GetFlag(FLAGS_durability));
  }
  if (absl::GetFlag(FLAGS_strict)) config.set_strict_namespaces(true);
  if (!absl::GetFlag(FLAGS_tls_cert).empty()) {
    config.mutable_tls()->set_cert(absl::GetFlag(FLAGS_tls_cert));
  }
  if (!absl::GetFlag(FLAGS_tls_key).empty()) {
    config.mutable_tls()->set_key(absl::GetFlag(FLAGS_tls_key));
  }
  if (!absl::GetFlag(FLAGS_tls_ca).empty())
    config.mutable_tls()->set_ca(absl::GetFlag(FLAGS_tls_ca));
  if (absl::GetFlag(FLAGS_insecure)) config.set_insecure(true);
  if (const auto nodes = absl::GetFlag(FLAGS_cluster_nodes); !nodes.empty()) {
    config.mutable_cluster()->clear_nodes();
    for (const std::string& node : nodes) config.mutable_cluster()->add_nodes(node);
  }
  if (absl::GetFlag(FLAGS_node_index) >= 0) {
    config.mutable_cluster()->set_node_index(
        static_cast<uint32_t>(absl::GetFlag(FLAGS_node_index)));
  }
  if (absl::GetFlag(FLAGS_replication_factor) != 0) {
    config.mutable_cluster()->set_replication_factor(absl::GetFlag(FLAGS_replication_factor));
  }
  if (const auto etcd = absl::GetFlag(FLAGS_etcd_endpoints); !etcd.empty()) {
    config.mutable_cluster()->clear_etcd_endpoints();
    for (const std::string& endpoint : etcd) config.mutable_cluster()->add_etcd_endpoints(endpoint);
  }
  if (!absl::GetFlag(FLAGS_cluster_name).empty()) {
    config.mutable_cluster()->set_name(absl::GetFlag(FLAGS_cluster_name));
  }
  if (!absl::GetFlag(FLAGS_leader_lease).empty()) {
    config.mutable_cluster()->set_leader_lease(absl::GetFlag(FLAGS_leader_lease));
  }
  if (absl::GetFlag(FLAGS_move_bytes_per_second) != 0) {
    config.mutable_cluster()->set_move_bytes_per_second(absl::GetFlag(FLAGS_move_bytes_per_second));
  }
  if (!absl::GetFlag(FLAGS_zone).empty()) {
    config.mutable_cluster()->set_zone(absl::GetFlag(FLAGS_zone));
  }
  if (absl::GetFlag(FLAGS_workers) != 0) config.set_workers(absl::GetFlag(FLAGS_workers));
  if (!absl::GetFlag(FLAGS_execution).empty()) {
    config.set_execution(absl::GetFlag(FLAGS_execution));
  }
  if (absl::GetFlag(FLAGS_max_key_bytes) != 0) {
    config.set_max_key_bytes(absl::GetFlag(FLAGS_max_key_bytes));
  }
  return config;
}

bool SetLogLevel(const std::string& name) {
  const spdlog::level::level_enum level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off") return false;
  spdlog::set_level(level);
  return true;
}

// Blocks the shutdown signals in this thread and every thread it starts, so
// that they are taken only by the sigwait in main.
sigset_t BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// jemalloc's opt.muzzy_decay_ms in effect (after MALLOC_CONF), for the
// start-up line; absent with another allocator.
std::optional<int64_t> AllocatorMuzzyDecayMs() {
#ifdef DEDUP_WITH_JEMALLOC
  ssize_t decay_ms = 0;
  size_t size = sizeof(decay_ms);
  if (mallctl("opt.muzzy_decay_ms", &decay_ms, &size, nullptr, 0) == 0) return decay_ms;
#endif
  return std::nullopt;
}

// Returns what jemalloc holds free, dirty or lazily freed, to the kernel at
// once (MADV_DONTNEED), in every arena: MemoryRelease calls it after large
// answers were freed, which the decay above would leave resident.
void PurgeAllocator() {
#ifdef DEDUP_WITH_JEMALLOC
  static_assert(MALLCTL_ARENAS_ALL == 4096, "the mallctl name below spells it");
  mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
#endif
}

// The allocator this binary links, for the start-up line.
std::string AllocatorName() {
#ifdef DEDUP_WITH_JEMALLOC
  const char* version = nullptr;
  size_t size = sizeof(version);
  if (mallctl("version", &version, &size, nullptr, 0) == 0 && version != nullptr) {
    return absl::StrCat("jemalloc ", version);
  }
  return "jemalloc";
#else
  return "glibc malloc";
#endif
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage_config.version_string = [] { return absl::StrCat("dedupd ", dedup::kVersion, "\n"); };
  absl::SetFlagsUsageConfig(usage_config);
  if (std::optional<int> exit_code = CheckCommandLine(argc, argv)) return *exit_code;
  // Debian builds Abseil without NDEBUG, which turns on absl::Mutex deadlock
  // detection: a graph update per lock, quadratic in the locks a batch holds
  // at once. Lock order is fixed by design (stripes ascend), and the test
  // suite keeps detection on to prove it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::ParseCommandLine(argc, argv);

  absl::StatusOr<LogFormat> log_format = ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!log_format.ok()) {
    std::cerr << "dedupd: " << log_format.status().message() << "\n";
    return 2;
  }
  ConfigureLogging({*log_format, absl::GetFlag(FLAGS_log_keys)});
  if (!SetLogLevel(absl::GetFlag(FLAGS_log_level))) {
    std::cerr << "dedupd: --log_level: unknown level '" << absl::GetFlag(FLAGS_log_level)
              << "' (trace, debug, info, warn, error, off)\n";
    return 2;
  }
  absl::StatusOr<ServerConfig> config = LoadConfig();
  absl::StatusOr<dedup::server::ServerSettings> settings =
      config.ok() ? dedup::server::ResolveSettings(*config)
                  : absl::StatusOr<dedup::server::ServerSettings>(config.status());
  if (!settings.ok()) {
    std::cerr << "dedupd: bad configuration: " << settings.status().message() << "\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_check_config)) {
    std::cout << "configuration OK: " << dedup::server::DescribeSettings(*settings) << "\n";
    return 0;
  }

  const sigset_t signals = BlockShutdownSignals();
  LogEvent(
      spdlog::level::info, "starting",
      {{"version", dedup::kVersion}, {"settings", dedup::server::DescribeSettings(*settings)}});
  if (settings->insecure_plaintext) {
    LogEvent(spdlog::level::warn,
             "serving plaintext gRPC on a non-loopback address (--insecure): anyone who can "
             "reach it can read and forge every call",
             {{"listen", settings->listen}});
  }
  // Before the server starts: its bound on connections follows the limit.
  const uint64_t open_file_limit = dedup::server::RaiseDescriptorLimit();
  dedup::server::SetAllocatorRelease(PurgeAllocator);
  absl::StatusOr<std::unique_ptr<dedup::server::DedupServer>> server =
      dedup::server::DedupServer::Start(*settings);
  if (!server.ok()) {
    LogEvent(spdlog::level::err, "cannot start", {{"error", server.status().message()}});
    return 1;
  }
  std::vector<LogField> serving = {{"listen", settings->listen},
                                   {"port", (*server)->port()},
                                   {"metrics_port", (*server)->http_port()},
                                   {"probe_port", (*server)->probe_port()},
                                   {"data_dir", settings->store.path},
                                   {"shards", (*server)->store()->shard_count()},
                                   {"open_file_limit", open_file_limit},
                                   {"allocator", AllocatorName()}};
  if (const std::optional<int64_t> decay = AllocatorMuzzyDecayMs(); decay.has_value()) {
    serving.emplace_back("allocator_muzzy_decay_ms", *decay);
  }
  LogEvent(spdlog::level::info, "serving dedup.v1.Dedup", serving);

  if (const std::string port_file = absl::GetFlag(FLAGS_port_file); !port_file.empty()) {
    std::ofstream out(port_file, std::ios::trunc);
    out << (*server)->port() << "\n";
    if (!out.flush()) {
      LogEvent(spdlog::level::err, "cannot write --port_file", {{"path", port_file}});
      return 1;
    }
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LogEvent(spdlog::level::info, "draining in-flight calls",
           {{"signal", signal_number == SIGTERM ? "SIGTERM" : "SIGINT"},
            {"grace_ms", settings->shutdown_grace_ms}});
  (*server)->Shutdown(absl::Milliseconds(settings->shutdown_grace_ms));
  LogEvent(spdlog::level::info, "stopped cleanly");
  return 0;
}
