#include "server/server_settings.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace dedup::server {
namespace {

constexpr char kDefaultListen[] = "127.0.0.1:7400";
constexpr char kDefaultMetricsListen[] = "127.0.0.1:7401";
constexpr char kDefaultDataDir[] = "./dedupd-data";
constexpr uint32_t kMaxKeyBytesLimit = 64 * 1024;
constexpr uint32_t kMaxResultBytesLimit = 3 * 1024 * 1024;  // Under gRPC's 4 MiB.

class CollectErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    errors_.push_back(absl::StrCat("line ", line + 1, ":", column + 1, ": ", message));
  }
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::vector<std::string> errors_;
};

// Parses `text` as a duration of at least `min_ms` into `out_ms`, keeping
// `fallback_ms` when the field is unset.
absl::Status ParseDurationField(const std::string& text, int64_t fallback_ms, int64_t min_ms,
                                const std::string& field, int64_t* out_ms) {
  if (text.empty()) {
    *out_ms = fallback_ms;
    return absl::OkStatus();
  }
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": '", text, "' is not a duration (write e.g. \"30s\", \"10m\", \"24h\")"));
  }
  // Checked before converting: ToInt64Milliseconds saturates silently.
  if (d > absl::Milliseconds(kMaxConfigDurationMs) ||
      d < -absl::Milliseconds(kMaxConfigDurationMs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must be at most ", kMaxConfigDurationMs, "ms (10 years), got '", text, "'"));
  }
  *out_ms = absl::ToInt64Milliseconds(d);
  if (*out_ms < min_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be at least ", min_ms, "ms, got '", text, "'"));
  }
  return absl::OkStatus();
}

// Fills `out` from `in`, taking unset fields from `base`.
absl::Status ResolvePolicy(const v1::NamespacePolicy& in, const Policy& base,
                           const std::string& field, Policy* out) {
  absl::Status s;
  s.Update(ParseDurationField(in.lease_default(), base.lease_default_ms, 1,
                              field + ".lease_default", &out->lease_default_ms));
  s.Update(ParseDurationField(in.lease_max(), base.lease_max_ms, 1, field + ".lease_max",
                              &out->lease_max_ms));
  s.Update(ParseDurationField(in.retention_default(), base.retention_default_ms, 1,
                              field + ".retention_default", &out->retention_default_ms));
  s.Update(ParseDurationField(in.retention_floor(), base.retention_floor_ms, 0,
                              field + ".retention_floor", &out->retention_floor_ms));
  if (!s.ok()) return s;
  out->max_result_bytes =
      in.max_result_bytes() != 0 ? in.max_result_bytes() : base.max_result_bytes;
  out->max_attempts = in.max_attempts() != 0 ? in.max_attempts() : base.max_attempts;
  if (out->lease_default_ms > out->lease_max_ms) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".lease_default: ", out->lease_default_ms,
                                                   "ms is above lease_max ", out->lease_max_ms,
                                                   "ms"));
  }
  if (out->retention_default_ms < out->retention_floor_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".retention_default: ", out->retention_default_ms,
                     "ms is below retention_floor ", out->retention_floor_ms, "ms"));
  }
  if (out->max_result_bytes > kMaxResultBytesLimit) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".max_result_bytes: must be at most ",
                                                   kMaxResultBytesLimit, ", got ",
                                                   out->max_result_bytes));
  }
  return absl::OkStatus();
}

absl::Status ResolveStorage(const v1::ServerConfig& config, storage::StoreOptions* out) {
  out->path = config.data_dir().empty() ? kDefaultDataDir : config.data_dir();
  if (config.shards() > storage::kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards: must be 1..", storage::kMaxShards, ", got ", config.shards()));
  }
  out->shards = config.shards();
  if (config.durability().empty() || config.durability() == "fsync") {
    out->durability = storage::Durability::kFsync;
  } else if (config.durability() == "buffered") {
    out->durability = storage::Durability::kBuffered;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "durability: must be \"fsync\" or \"buffered\", got \"", config.durability(), "\""));
  }
  // Built-in: hash, on replicated nodes too, whose shard moves walk the
  // records on one iterator and so sort a memtable once a move, not once
  // a page (ReplicationLog::RecordWalk).
  if (config.memtable().empty() || config.memtable() == "auto" || config.memtable() == "hash") {
    out->hash_memtable = true;
  } else if (config.memtable() == "skiplist") {
    out->hash_memtable = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "memtable: must be \"auto\", \"skiplist\" or \"hash\", got \"", config.memtable(), "\""));
  }
  int64_t periodic_ms = 0;
  absl::Status s;
  s.Update(ParseDurationField(config.buffered_sync_interval(), 100, 1, "buffered_sync_interval",
                              &out->buffered_sync_interval_ms));
  s.Update(ParseDurationField(config.abandoned_grace(), 3600'000, 0, "abandoned_grace",
                              &out->abandoned_grace_ms));
  s.Update(ParseDurationField(config.periodic_compaction(), 24 * 3600'000LL, 0,
                              "periodic_compaction", &periodic_ms));
  out->periodic_compaction_seconds = static_cast<uint64_t>(periodic_ms / 1000);
  s.Update(ParseDurationField(config.clock_step_tolerance(), 1000, 100, "clock_step_tolerance",
                              &out->clock_step_tolerance_ms));
  s.Update(ParseDurationField(config.clock_step_confirmation(), 10 * 60'000, 0,
                              "clock_step_confirmation", &out->clock_step_confirmation_ms));
  if (s.ok() && out->clock_step_tolerance_ms > 3600'000) {
    s = absl::InvalidArgumentError(absl::StrCat("clock_step_tolerance: must be at most 1h, got ",
                                                out->clock_step_tolerance_ms, "ms"));
  }
  if (s.ok() && out->clock_step_confirmation_ms > 24 * 3600'000) {
    s = absl::InvalidArgumentError(
        absl::StrCat("clock_step_confirmation: must be at most 24h, got ",
                     out->clock_step_confirmation_ms, "ms"));
  }
  return s;
}

// Far above what one node serves: a rate that can never pace is a mistake.
constexpr uint32_t kMaxOperationsPerSecond = 100'000'000;

// Takes `value` unless it is 0 (unset), then checks min..max.
absl::Status ResolveCount(uint32_t value, uint32_t min, uint32_t max, const std::string& field,
                          uint32_t* out) {
  if (value != 0) *out = value;
  if (*out < min || *out > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be ", min, "..", max, ", got ", *out));
  }
  return absl::OkStatus();
}

absl::Status ResolveLimits(const v1::LimitsConfig& in, ServerLimits* out) {
  constexpr uint32_t kMiB = 1 << 20;
  absl::Status s;
  s.Update(ResolveCount(in.max_queued_tasks(), 1, 1 << 20, "limits.max_queued_tasks",
                        &out->max_queued_tasks));
  s.Update(ResolveCount(in.max_receive_message_bytes(), 64 * 1024, 64 * kMiB,
                        "limits.max_receive_message_bytes", &out->max_receive_message_bytes));
  s.Update(ResolveCount(in.max_send_message_bytes(), kMiB, 64 * kMiB,
                        "limits.max_send_message_bytes", &out->max_send_message_bytes));
  s.Update(ResolveCount(in.max_concurrent_streams(), 1, 100'000, "limits.max_concurrent_streams",
                        &out->max_concurrent_streams));
  s.Update(ParseDurationField(in.keepalive_time(), out->keepalive_time_ms, 1000,
                              "limits.keepalive_time", &out->keepalive_time_ms));
  s.Update(ParseDurationField(in.keepalive_timeout(), out->keepalive_timeout_ms, 1000,
                              "limits.keepalive_timeout", &out->keepalive_timeout_ms));
  s.Update(ParseDurationField(in.min_client_ping_interval(), out->min_client_ping_interval_ms, 0,
                              "limits.min_client_ping_interval",
                              &out->min_client_ping_interval_ms));
  s.Update(ResolveCount(in.max_stream_batches(), 1, 1024, "limits.max_stream_batches",
                        &out->max_stream_batches));
  s.Update(ResolveCount(in.max_stream_answer_bytes(), 64 * 1024, 1024 * kMiB,
                        "limits.max_stream_answer_bytes", &out->max_stream_answer_bytes));
  s.Update(ResolveCount(in.scan_max_examined(), 1, 1 << 24, "limits.scan_max_examined",
                        &out->scan_max_examined));
  s.Update(ResolveCount(in.scan_workers(), 1, 64, "limits.scan_workers", &out->scan_workers));
  s.Update(ResolveCount(in.max_open_streams(), 1, 100'000, "limits.max_open_streams",
                        &out->max_open_streams));
  s.Update(ParseDurationField(in.max_connection_age(), out->max_connection_age_ms, 0,
                              "limits.max_connection_age", &out->max_connection_age_ms));
  s.Update(ParseDurationField(in.max_connection_age_grace(), out->max_connection_age_grace_ms, 0,
                              "limits.max_connection_age_grace",
                              &out->max_connection_age_grace_ms));
  s.Update(ResolveCount(in.max_connections(), 1, 1 << 20, "limits.max_connections",
                        &out->max_connections));
  s.Update(ParseDurationField(in.handshake_timeout(), out->handshake_timeout_ms, 100,
                              "limits.handshake_timeout", &out->handshake_timeout_ms));
  if (s.ok()) {
    // Unset, a per-address or per-identity share is at most the whole.
    out->max_connections_per_address =
        std::min(out->max_connections_per_address, out->max_connections);
    out->max_open_streams_per_identity =
        std::min(out->max_open_streams_per_identity, out->max_open_streams);
    s.Update(ResolveCount(in.max_connections_per_address(), 1, out->max_connections,
                          "limits.max_connections_per_address", &out->max_connections_per_address));
    s.Update(ResolveCount(in.max_open_streams_per_identity(), 1, out->max_open_streams,
                          "limits.max_open_streams_per_identity",
                          &out->max_open_streams_per_identity));
    s.Update(ResolveCount(in.max_queued_tasks_per_identity(), 1, 1 << 20,
                          "limits.max_queued_tasks_per_identity",
                          &out->max_queued_tasks_per_identity));
  }
  out->max_operations_per_second_per_identity = in.max_operations_per_second_per_identity();
  if (out->max_operations_per_second_per_identity > kMaxOperationsPerSecond) {
    s.Update(absl::InvalidArgumentError(absl::StrCat(
        "limits.max_operations_per_second_per_identity: must be 0 (no rate) to ",
        kMaxOperationsPerSecond, ", got ", out->max_operations_per_second_per_identity)));
  }
  if (s.ok() && out->max_connection_age_ms > 0 && out->max_connection_age_ms < 1000) {
    return absl::InvalidArgumentError(
        "limits.max_connection_age: must be 0s (none) or at least 1s");
  }
  if (!s.ok()) return s;
  // An answer of max_batch_answer_bytes of records, plus the framing of up
  // to 1,000 items, must fit in one message.
  return ResolveCount(in.max_batch_answer_bytes(), 64 * 1024,
                      out->max_send_message_bytes - kMiB / 2, "limits.max_batch_answer_bytes",
                      &out->max_batch_answer_bytes);
}

// TLS files, and the rule that plaintext needs a loopback address or an
// explicit acknowledgement.
absl::Status ResolveTransport(const v1::ServerConfig& config, ServerSettings* settings) {
  const v1::TlsConfig& in = config.tls();
  TlsSettings& tls = settings->tls;
  tls.cert = in.cert();
  tls.key = in.key();
  tls.ca = in.ca();
  absl::Status s = ParseDurationField(in.refresh_interval(), tls.refresh_interval_ms, 1000,
                                      "tls.refresh_interval", &tls.refresh_interval_ms);
  if (!s.ok()) return s;
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError("tls: cert and key must be set together");
  }
  if (!tls.enabled() && !tls.ca.empty()) {
    return absl::InvalidArgumentError("tls.ca: set without tls.cert and tls.key");
  }
  if (tls.enabled() || IsLoopbackListen(settings->listen)) return absl::OkStatus();
  if (!config.insecure()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: ", settings->listen,
        " is not a loopback address, and plaintext there lets anyone who reaches it read and "
        "forge every call; configure tls { cert key ca }, or acknowledge with --insecure"));
  }
  settings->insecure_plaintext = true;
  return absl::OkStatus();
}

absl::Status ResolveAuth(const v1::AuthConfig& in, AuthSettings* out) {
  out->tokens_file = in.tokens_file();
  absl::Status s = ParseDurationField(in.refresh_interval(), out->refresh_interval_ms, 100,
                                      "auth.refresh_interval", &out->refresh_interval_ms);
  s.Update(ResolveCount(in.max_unknown_tokens(), 1, 1'000'000, "auth.max_unknown_tokens",
                        &out->max_unknown_tokens));
  s.Update(ParseDurationField(in.unknown_token_penalty(), out->unknown_token_penalty_ms, 100,
                              "auth.unknown_token_penalty", &out->unknown_token_penalty_ms));
  if (!s.ok()) return s;
  for (int i = 0; i < in.grants_size(); ++i) {
    const v1::GrantConfig& g = in.grants(i);
    const std::string field = absl::StrCat("auth.grants[", i, "]");
    Grant grant;
    absl::StatusOr<std::string> identity =
        GrantIdentity(g.identity(), absl::StrCat(field, ".identity"));
    if (!identity.ok()) return identity.status();
    grant.identity = *std::move(identity);
    if (g.namespaces().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".namespaces: name at least one namespace, or \"*\" for all"));
    }
    for (int j = 0; j < g.namespaces_size(); ++j) {
      if (g.namespaces(j) == "*") continue;
      s = ValidateNamespaceName(g.namespaces(j), absl::StrCat(field, ".namespaces[", j, "]"));
      if (!s.ok()) return s;
    }
    grant.namespaces.assign(g.namespaces().begin(), g.namespaces().end());
    constexpr char kRoles[] =
        "\"claim\", \"read\", \"scan\", \"cluster\", \"admin\" (scan and cluster) or "
        "\"replica\"";
    if (g.roles().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".roles: name at least one of ", kRoles));
    }
    for (int j = 0; j < g.roles_size(); ++j) {
      const std::string& role = g.roles(j);
      if (role == "claim") {
        grant.claim = true;
      } else if (role == "read") {
        grant.read = true;
      } else if (role == "scan") {
        grant.scan = true;
      } else if (role == "cluster") {
        grant.cluster = true;
      } else if (role == "admin") {
        grant.scan = grant.cluster = true;
      } else if (role == "replica") {
        grant.replica = true;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".roles[", j, "]: must be ", kRoles, ", got \"", role, "\""));
      }
      const bool everywhere = std::find(grant.namespaces.begin(), grant.namespaces.end(), "*") !=
                              grant.namespaces.end();
      if (role == "cluster" && !everywhere) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".roles[", j,
            "]: \"cluster\" moves replicas of every namespace at once; grant it on namespaces "
            "\"*\""));
      }
    }
    out->grants.push_back(std::move(grant));
  }
  if (!out->tokens_file.empty() && out->grants.empty()) {
    return absl::InvalidArgumentError(
        "auth.tokens_file: set without auth.grants; grants decide what an identity may do, and "
        "without any every caller may do everything");
  }
  return absl::OkStatus();
}

absl::Status ResolveCluster(const v1::ClusterConfig& cluster, ServerSettings* settings) {
  settings->cluster_nodes.assign(cluster.nodes().begin(), cluster.nodes().end());
  settings->node_index = cluster.node_index();
  for (size_t i = 0; i < settings->cluster_nodes.size(); ++i) {
    if (settings->cluster_nodes[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("cluster.nodes[", i, "]: empty address"));
    }
  }
  settings->replication_factor = std::max<uint32_t>(cluster.replication_factor(), 1);
  settings->etcd_endpoints.assign(cluster.etcd_endpoints().begin(), cluster.etcd_endpoints().end());
  if (!cluster.name().empty()) {
    const absl::Status named = ValidateNamespaceName(cluster.name(), "cluster.name");
    if (!named.ok()) return named;
    settings->cluster_name = cluster.name();
  }
  absl::Status lease = ParseDurationField(cluster.leader_lease(), 3'000, 2'000,
                                          "cluster.leader_lease", &settings->leader_lease_ms);
  if (!lease.ok()) return lease;
  if (cluster.move_bytes_per_second() != 0) {
    settings->move_bytes_per_second = cluster.move_bytes_per_second();
  }
  if (!cluster.zone().empty()) {
    const bool valid = cluster.zone().size() <= 63 &&
                       std::all_of(cluster.zone().begin(), cluster.zone().end(), [](char c) {
                         return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                                c == '_' || c == '-';
                       });
    if (!valid) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster.zone: letters, digits, '.', '_' and '-', at most 63, got \"",
                       cluster.zone(), "\""));
    }
    settings->zone = cluster.zone();
  }
  if (settings->replication_factor > 1) {
    if (settings->replication_factor > settings->cluster_nodes.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster.replication_factor: at most the number of cluster.nodes (",
                       settings->cluster_nodes.size(), "), got ", settings->replication_factor));
    }
    if (settings->etcd_endpoints.empty()) {
      return absl::InvalidArgumentError(
          "cluster.etcd_endpoints: a replicated cluster (replication_factor above 1) keeps its "
          "leaders in etcd; give its client endpoints (host:port)");
    }
  } else if (!settings->etcd_endpoints.empty()) {
    return absl::InvalidArgumentError(
        "cluster.etcd_endpoints: set without cluster.replication_factor above 1; only a "
        "replicated cluster uses etcd");
  }
  if (settings->cluster_nodes.empty()) {
    if (settings->node_index != 0) {
      return absl::InvalidArgumentError("cluster.node_index: set without cluster.nodes");
    }
    settings->store.identity = "single node";
    return absl::OkStatus();
  }
  if (settings->node_index >= settings->cluster_nodes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.node_index: must be 0..", settings->cluster_nodes.size() - 1,
                     " (one per cluster.nodes entry), got ", settings->node_index));
  }
  settings->store.identity =
      settings->cluster_nodes.size() == 1
          ? "single node"
          : absl::StrCat("node ", settings->node_index, " of ", settings->cluster_nodes.size());
  return absl::OkStatus();
}

// Needs durability and replication resolved. Inline execution runs calls
// on gRPC's threads where none of them would wait for a disk or a
// follower. With fsync on a single node it makes the store's writes
// unsynced and answers each call once the store's group sync covers it
// (StoreOptions::group_sync). On a replicated node, in either durability,
// Stream batches are decided and appended on the gRPC thread and answered
// by the thread that sees their commit, the log's syncs being another
// thread's (docs/replication.md §2), and everything that would wait still
// goes to the workers.
absl::Status ResolveExecution(const std::string& execution, ServerSettings* settings) {
  const bool replicated = settings->replication_factor > 1;
  const bool fsync = settings->store.durability == storage::Durability::kFsync;
  if (execution.empty() || execution == "auto" || execution == "inline") {
    settings->execution = Execution::kInline;
  } else if (execution == "workers") {
    settings->execution = Execution::kWorkers;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "execution: must be \"auto\", \"workers\" or \"inline\", got \"", execution, "\""));
  }
  settings->store.group_sync = fsync && !replicated && settings->execution == Execution::kInline;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::ServerConfig> ParseConfigText(const std::string& text) {
  v1::ServerConfig config;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    return absl::InvalidArgumentError(errors.Joined());
  }
  return config;
}

absl::StatusOr<v1::ServerConfig> ParseConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<v1::ServerConfig> config = ParseConfigText(text.str());
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file ", path, ": ", config.status().message()));
  }
  return config;
}

absl::StatusOr<ServerSettings> ResolveSettings(const v1::ServerConfig& config) {
  ServerSettings settings;
  settings.listen = config.listen().empty() ? kDefaultListen : config.listen();
  settings.max_key_bytes = config.max_key_bytes() != 0 ? config.max_key_bytes() : 512;
  if (settings.max_key_bytes > kMaxKeyBytesLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_key_bytes: must be at most ", kMaxKeyBytesLimit, ", got ", settings.max_key_bytes));
  }
  settings.workers = config.workers() != 0 ? config.workers() : 32;
  if (settings.workers > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers: must be 1..1024, got ", settings.workers));
  }
  absl::Status s = ParseDurationField(config.shutdown_grace(), 10'000, 0, "shutdown_grace",
                                      &settings.shutdown_grace_ms);
  s.Update(ParseDurationField(config.stats_interval(), 10'000, 100, "stats_interval",
                              &settings.stats_interval_ms));
  if (!s.ok()) return s;
  settings.metrics_listen = config.metrics_listen().empty()    ? kDefaultMetricsListen
                            : config.metrics_listen() == "off" ? ""
                                                               : config.metrics_listen();
  settings.probe_listen = config.probe_listen() == "off" ? "" : config.probe_listen();
  settings.max_namespace_labels =
      config.max_namespace_labels() != 0 ? config.max_namespace_labels() : 100;
  s = ResolveLimits(config.limits(), &settings.limits);
  if (!s.ok()) return s;
  s = ResolveTransport(config, &settings);
  if (!s.ok()) return s;
  s = ResolveAuth(config.auth(), &settings.auth);
  if (!s.ok()) return s;
  if (settings.limits.max_operations_per_second_per_identity > 0 && !settings.auth.enabled()) {
    return absl::InvalidArgumentError(
        "limits.max_operations_per_second_per_identity: set without auth.grants; without them "
        "callers are not told apart, and no rate would apply");
  }
  if (!settings.auth.tokens_file.empty() && settings.insecure_plaintext) {
    return absl::InvalidArgumentError(
        "auth.tokens_file: bearer tokens over plaintext on a non-loopback address can be read "
        "and replayed by anyone on the network path; configure tls { cert key }");
  }
  s = ResolveCluster(config.cluster(), &settings);
  if (!s.ok()) return s;
  s = ResolveStorage(config, &settings.store);
  if (!s.ok()) return s;
  s = ResolveExecution(config.execution(), &settings);
  if (!s.ok()) return s;

  Policy default_policy;
  s = ResolvePolicy(config.default_policy(), Policy(), "default_policy", &default_policy);
  if (!s.ok()) return s;
  absl::flat_hash_map<std::string, Policy> declared;
  for (int i = 0; i < config.namespaces_size(); ++i) {
    const v1::NamespaceConfig& ns = config.namespaces(i);
    const std::string field = absl::StrCat("namespaces[", i, "]");
    s = ValidateNamespaceName(ns.name(), field + ".name");
    if (!s.ok()) return s;
    Policy policy;
    s = ResolvePolicy(ns.policy(), default_policy, field + ".policy", &policy);
    if (!s.ok()) return s;
    if (!declared.emplace(ns.name(), policy).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".name: namespace '", ns.name(), "' is declared twice"));
    }
  }
  settings.policies = std::make_shared<PolicyTable>(default_policy, std::move(declared),
                                                    config.strict_namespaces());
  return settings;
}

std::string DescribeSettings(const ServerSettings& s) {
  return absl::StrCat(
      "listen=", s.listen,
      " metrics_listen=", s.metrics_listen.empty() ? std::string("off") : s.metrics_listen,
      " probe_listen=", s.probe_listen.empty() ? std::string("off") : s.probe_listen,
      " grpc_transport=",
      s.tls.mutual()         ? "mtls"
      : s.tls.enabled()      ? "tls"
      : s.insecure_plaintext ? "plaintext-insecure"
                             : "plaintext-loopback",
      " auth=",
      s.auth.enabled() ? absl::StrCat(s.auth.grants.size(), "-grants") : std::string("off"),
      " data_dir=", s.store.path, " shards=",
      s.store.shards != 0        ? absl::StrCat(s.store.shards)
      : s.replication_factor > 1 ? std::string("existing-or-cluster's")
                                 : std::string("existing-or-16"),
      " durability=", s.store.durability == storage::Durability::kFsync ? "fsync" : "buffered",
      " strict=", s.policies->strict() ? "true" : "false", " cluster=", s.store.identity,
      s.replication_factor > 1 ? absl::StrCat(" replication_factor=", s.replication_factor,
                                              " etcd=", absl::StrJoin(s.etcd_endpoints, ","),
                                              " cluster_name=", s.cluster_name)
                               : std::string(),
      " namespaces=", s.policies->declared().size(), " workers=", s.workers,
      " execution=", s.execution == Execution::kInline ? "inline" : "workers",
      " memtable=", s.store.hash_memtable ? "hash" : "skiplist", " max_key_bytes=", s.max_key_bytes,
      " max_queued_tasks=", s.limits.max_queued_tasks,
      " max_receive_message_bytes=", s.limits.max_receive_message_bytes,
      " max_batch_answer_bytes=", s.limits.max_batch_answer_bytes,
      " max_stream_batches=", s.limits.max_stream_batches,
      " max_stream_answer_bytes=", s.limits.max_stream_answer_bytes,
      " max_concurrent_streams=", s.limits.max_concurrent_streams,
      " max_open_streams=", s.limits.max_open_streams,
      " max_connections=", s.limits.max_connections,
      " max_connections_per_address=", s.limits.max_connections_per_address,
      " handshake_timeout_ms=", s.limits.handshake_timeout_ms,
      " max_open_streams_per_identity=", s.limits.max_open_streams_per_identity,
      " max_queued_tasks_per_identity=", s.limits.max_queued_tasks_per_identity,
      " max_operations_per_second_per_identity=", s.limits.max_operations_per_second_per_identity);
}

}  // namespace dedup::server
