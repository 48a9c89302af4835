#ifndef DEDUP_SERVER_SERVER_SETTINGS_H_
#define DEDUP_SERVER_SERVER_SETTINGS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dedup/v1/server_config.pb.h"
#include "server/authorization.h"
#include "server/limits.h"
#include "server/namespace_policy.h"
#include "server/transport_security.h"
#include "storage/store.h"

namespace dedup::server {

// Where a call's storage work runs (server_config.proto, `execution`).
enum class Execution {
  kWorkers,  // Handed to the worker pool.
  kInline,   // On the gRPC thread, except while RocksDB stalls writes.
};

// Everything dedupd runs with, validated and with defaults applied.
struct ServerSettings {
  std::string listen;
  uint32_t max_key_bytes = 512;
  uint32_t workers = 32;
  Execution execution = Execution::kWorkers;
  int64_t shutdown_grace_ms = 10'000;
  std::string metrics_listen;  // Empty: no HTTP endpoint.
  std::string probe_listen;    // Empty: probes only on metrics_listen.
  uint32_t max_namespace_labels = 100;
  int64_t stats_interval_ms = 10'000;
  std::vector<std::string> cluster_nodes;  // Empty: a single node.
  uint32_t node_index = 0;
  // Replicated cluster (docs/replication.md): above 1, each shard has this
  // many replicas and leadership is held in etcd.
  uint32_t replication_factor = 1;
  std::vector<std::string> etcd_endpoints;
  std::string cluster_name = "default";
  int64_t leader_lease_ms = 3'000;
  // What a shard's leader sends a move's target, at most (docs/elastic.md).
  uint64_t move_bytes_per_second = 32ull << 20;
  // This node's zone (cluster.zone); "" none given.
  std::string zone;
  ServerLimits limits;
  TlsSettings tls;
  // Plaintext on a non-loopback `listen`, acknowledged by --insecure.
  bool insecure_plaintext = false;
  AuthSettings auth;
  storage::StoreOptions store;  // clock left at the system clock.
  std::shared_ptr<const PolicyTable> policies;
};

// Longest duration any configuration field may hold (ten years), so that
// "now + duration" in milliseconds stays far from int64 overflow.
inline constexpr int64_t kMaxConfigDurationMs = 10LL * 365 * 24 * 3600 * 1000;

// Parses a configuration file in protobuf text format. Errors name the line
// and column.
absl::StatusOr<v1::ServerConfig> ParseConfigFile(const std::string& path);
absl::StatusOr<v1::ServerConfig> ParseConfigText(const std::string& text);

// Applies built-in defaults and validates `config`; an error names the
// offending field (e.g. "namespaces[1].policy.lease_max") and its bound.
absl::StatusOr<ServerSettings> ResolveSettings(const v1::ServerConfig& config);

// A one-line summary for the start-up log.
std::string DescribeSettings(const ServerSettings& settings);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_SERVER_SETTINGS_H_
