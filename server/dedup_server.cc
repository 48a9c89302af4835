#include "server/dedup_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dedup/build_info.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "prometheus/text_serializer.h"
#include "server/connection_gate.h"
#include "server/grpc_log.h"
#include "server/logging.h"
#include "spdlog/spdlog.h"

namespace dedup::server {
namespace {

int ClampToInt(int64_t value) {
  return static_cast<int>(std::min<int64_t>(value, std::numeric_limits<int>::max()));
}

// gRPC's read-ahead window per call (below).
constexpr int kStreamLookaheadBytes = 1 << 20;

// Message sizes, streams per connection, keepalive, the handshake timeout
// and the read-ahead window (design.md §10).
void ApplyTransportLimits(const ServerLimits& limits, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(ClampToInt(limits.max_receive_message_bytes));
  builder->SetMaxSendMessageSize(ClampToInt(limits.max_send_message_bytes));
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                              ClampToInt(limits.max_concurrent_streams));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ClampToInt(limits.keepalive_time_ms));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                              ClampToInt(limits.keepalive_timeout_ms));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              ClampToInt(limits.min_client_ping_interval_ms));
  // A client's keepalive pings between calls are allowed, at the pace above.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A connection is closed unless its TLS handshake (if any) is done and
  // the client's HTTP/2 preface and SETTINGS have arrived within this.
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                              ClampToInt(limits.handshake_timeout_ms));
  // What gRPC reads ahead of a call that is not reading: a Stream paused by
  // its budget (stream_reactor.h) holds at most this of requests in gRPC's
  // buffers. gRPC's own growth of the window (BDP probing) is off: it let
  // a paused Stream's requests pile up by gigabytes, 128 unread Streams
  // taking 4.9 GiB. A request of the 4 MiB maximum then needs four window
  // updates, one round trip each.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamLookaheadBytes);
  if (limits.max_connection_age_ms > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                                ClampToInt(limits.max_connection_age_ms));
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                ClampToInt(limits.max_connection_age_grace_ms));
  }
}

// How long readiness stays false after accepting failed for lack of
// descriptors.
constexpr absl::Duration kShortageMemory = absl::Seconds(1);

// Threads that may wait for replication calls at once on a replicated node:
// enough for every peer's shipping loop and a few moves or re-seeds.
constexpr int kReplicationPollers = 16;

// Where the cluster's keys live in etcd (cluster/replicator.h).
std::string EtcdPrefix(const ServerSettings& settings) {
  return absl::StrCat("/dedup/", settings.cluster_name, "/");
}

}  // namespace

absl::StatusOr<std::unique_ptr<DedupServer>> DedupServer::Start(const ServerSettings& settings,
                                                                const storage::Clock* clock) {
  RouteGrpcLog();
  std::unique_ptr<DedupServer> server(new DedupServer());
  absl::StatusOr<std::unique_ptr<Authorizer>> auth = Authorizer::Create(settings.auth);
  if (!auth.ok()) return auth.status();
  server->auth_ = std::move(*auth);
  storage::StoreOptions store_options = settings.store;
  if (clock != nullptr) store_options.clock = clock;
  const bool replicated = settings.replication_factor > 1;
  if (replicated) {
    cluster::EtcdOptions etcd_options;
    etcd_options.endpoints = settings.etcd_endpoints;
    absl::StatusOr<std::unique_ptr<cluster::EtcdClient>> etcd =
        cluster::EtcdClient::Connect(etcd_options);
    if (!etcd.ok()) return etcd.status();
    server->etcd_ = std::move(*etcd);
    // A new data directory takes the cluster's shard count, so that a node
    // added later needs no --shards; an existing one keeps its own, and
    // the replicator refuses it if that is not the cluster's.
    absl::StatusOr<uint32_t> cluster_shards =
        cluster::ShardsForNewDirectory(server->etcd_.get(), EtcdPrefix(settings));
    if (!cluster_shards.ok()) {
      return absl::Status(cluster_shards.status().code(),
                          absl::StrCat("cannot read the cluster's shard count from etcd: ",
                                       cluster_shards.status().message()));
    }
    store_options.new_shards = *cluster_shards;
  }
  absl::StatusOr<std::unique_ptr<storage::Store>> store = storage::Store::Open(store_options);
  if (!store.ok()) return store.status();
  server->store_ = std::move(*store);
  std::vector<std::string> declared;
  for (const auto& [name, policy] : settings.policies->declared()) declared.push_back(name);
  server->metrics_ = std::make_unique<Metrics>(declared, settings.max_namespace_labels, kVersion);
  // As many yielding threads as normal ones: an identity's work beyond its
  // share runs there (tenant_quota.h), as fast as the CPU others leave
  // allows.
  server->pool_ = std::make_unique<WorkerPool>(settings.workers, settings.limits.max_queued_tasks,
                                               "worker", settings.workers);
  server->scan_pool_ = std::make_unique<WorkerPool>(
      settings.limits.scan_workers, settings.limits.max_queued_tasks, "scan-worker");
  auto shards = std::make_shared<const ShardMap>(server->store_->shard_count(),
                                                 settings.cluster_nodes, settings.node_index);
  if (replicated) {
    absl::Status joined = server->JoinReplicatedCluster(settings);
    if (!joined.ok()) {
      server->pool_->Shutdown();
      server->scan_pool_->Shutdown();
      return joined;
    }
  }
  // Replicated, the store checks leadership per shard (replicator.h) and
  // the static owner rule does not apply.
  server->service_ = std::make_unique<DedupService>(
      server->store_.get(), server->pool_.get(), server->scan_pool_.get(), server->metrics_.get(),
      server->auth_.get(), shards,
      RequestTranslator(settings.policies, settings.max_key_bytes, replicated ? nullptr : shards),
      settings.limits, settings.execution);
  if (replicated) server->service_->SetReplicator(server->replicator_.get());
  server->memory_release_ =
      std::make_unique<MemoryRelease>(AllocatorRelease(), MemoryRelease::Options());
  server->service_->SetMemoryRelease(server->memory_release_.get());

  server->health_ = std::make_unique<HealthService>();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(settings.tls);
  if (!credentials.ok()) {
    server->pool_->Shutdown();
    server->scan_pool_->Shutdown();
    return credentials.status();
  }
  // gRPC binds with SO_REUSEPORT by default, which lets a second dedupd
  // start on a port already served and take half of its connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(settings.listen, *credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  builder.RegisterService(server->health_.get());
  if (server->replication_service_ != nullptr) {
    builder.RegisterService(server->replication_service_.get());
    // The replication calls other than Ship (replication_service.h) run on
    // gRPC's synchronous server, whose threads poll for calls. With gRPC's
    // defaults (at most 2 polling) a thread that finds a call starts
    // another one when none is left polling, and one that finishes exits
    // when 2 already poll: when Ship ran there too, threads were created
    // and ended all the time under load. Keeping up to kReplicationPollers
    // threads polling ends that churn (`bench/replicated --threads` reports
    // threads that ended during its runs).
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                                kReplicationPollers);
  }
  ApplyTransportLimits(settings.limits, &builder);
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    server->grpc_server_.reset();
    server->pool_->Shutdown();
    server->scan_pool_->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", settings.listen,
                     " (address in use, or not an address this machine has)"));
  }
  server->GuardConnections(settings.limits);
  server->health_->SetServingStatus(v1::Dedup::service_full_name(), true);
  DedupServer* raw = server.get();
  server->monitor_ = std::make_unique<StorageMonitor>(
      server->store_.get(), server->metrics_.get(), absl::Milliseconds(settings.stats_interval_ms),
      [raw](const absl::Status& health) { raw->OnStorageChange(health); });
  // Gauges hold real values from the first scrape on, not zeros that would
  // look like storage emptying after every restart.
  server->monitor_->Refresh();
  if (!settings.metrics_listen.empty()) {
    auto http = HttpEndpoint::Start(settings.metrics_listen,
                                    {{"/metrics", [raw] { return raw->Scrape(); }},
                                     {"/healthz", [raw] { return raw->Probe(false); }},
                                     {"/readyz", [raw] { return raw->Probe(true); }}});
    if (!http.ok()) return http.status();
    server->http_ = std::move(*http);
  }
  if (!settings.probe_listen.empty()) {
    auto probes = HttpEndpoint::Start(settings.probe_listen,
                                      {{"/healthz", [raw] { return raw->Probe(false); }},
                                       {"/readyz", [raw] { return raw->Probe(true); }}});
    if (!probes.ok()) return probes.status();
    server->probes_ = std::move(*probes);
  }
  return server;
}

absl::Status DedupServer::JoinReplicatedCluster(const ServerSettings& settings) {
  absl::StatusOr<std::unique_ptr<storage::ReplicationLog>> log = store_->OpenReplicationLog();
  if (!log.ok()) return log.status();
  replication_log_ = std::move(*log);
  cluster::ReplicatorOptions options;
  options.nodes = settings.cluster_nodes;
  options.self = settings.node_index;
  options.replication_factor = settings.replication_factor;
  options.etcd_prefix = EtcdPrefix(settings);
  options.lease_ttl = absl::Milliseconds(settings.leader_lease_ms);
  options.move_bytes_per_second = settings.move_bytes_per_second;
  options.zone = settings.zone;
  options.peer_message_bytes =
      std::min(settings.limits.max_receive_message_bytes, settings.limits.max_send_message_bytes);
  // With TLS, peers are called with this node's own certificate, whose
  // identity the peers' grants must give the "replica" role.
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> peer_credentials =
      PeerCredentialsFor(settings.tls);
  if (!peer_credentials.ok()) return peer_credentials.status();
  options.peer_credentials = std::move(*peer_credentials);
  absl::StatusOr<std::unique_ptr<cluster::Replicator>> replicator =
      cluster::Replicator::Start(options, etcd_.get(), replication_log_.get(), store_.get());
  if (!replicator.ok()) {
    return absl::Status(
        replicator.status().code(),
        absl::StrCat("cannot join the replicated cluster: ", replicator.status().message()));
  }
  replicator_ = std::move(*replicator);
  store_->SetReplicator(replicator_.get());
  replication_metrics_ =
      std::make_unique<cluster::ReplicationMetrics>(replicator_.get(), settings.replication_factor);
  replication_pool_ = std::make_unique<WorkerPool>(
      kReplicationPollers, settings.limits.max_queued_tasks, "replica-ship");
  replication_service_ = std::make_unique<cluster::ReplicationService>(
      replicator_.get(), auth_.get(), store_.get(), replication_pool_.get());
  return absl::OkStatus();
}

DedupServer::~DedupServer() { Shutdown(absl::ZeroDuration()); }

void DedupServer::GuardConnections(const ServerLimits& limits) {
  ConnectionTable::Limits bounds{limits.max_connections, limits.max_connections_per_address};
  // Half the descriptors stay for storage files, the HTTP endpoints and
  // gRPC's own needs.
  rlimit descriptors{};
  if (getrlimit(RLIMIT_NOFILE, &descriptors) == 0 && descriptors.rlim_cur != RLIM_INFINITY) {
    const uint64_t half = std::max<uint64_t>(descriptors.rlim_cur / 2, 16);
    if (bounds.max_connections > half) {
      LogEvent(spdlog::level::warn,
               "limits.max_connections is above half the open-file limit; using half",
               {{"max_connections", limits.max_connections},
                {"open_file_limit", static_cast<uint64_t>(descriptors.rlim_cur)},
                {"used", half}});
      bounds.max_connections = static_cast<uint32_t>(half);
      bounds.max_connections_per_address =
          std::min(bounds.max_connections_per_address, bounds.max_connections);
    }
  }
  Metrics* metrics = metrics_.get();
  ConnectionGate::Get().Guard(port_, bounds, [metrics](ConnectionRefusal reason) {
    metrics->RecordConnectionRefused(reason);
  });
}

void DedupServer::OnStorageChange(const absl::Status& health) {
  if (health.ok()) {
    storage_ = StorageHealth::kHealthy;
    LogEvent(spdlog::level::info, "storage recovered, accepting writes again");
  } else if (absl::IsResourceExhausted(health)) {
    storage_ = StorageHealth::kOutOfSpace;
    LogEvent(spdlog::level::err,
             "storage out of space: writes answer UNAVAILABLE, reads continue; writes resume "
             "once space is freed",
             {{"error", health.message()}});
  } else {
    storage_ = StorageHealth::kFailed;
    LogEvent(spdlog::level::err, "storage failed, answering NOT_SERVING until restarted",
             {{"error", health.message()}});
  }
  if (health_ != nullptr && !draining_) health_->SetServingStatus(health.ok());
}

bool DedupServer::ShortOfDescriptors() const {
  return ConnectionGate::Get().ShortOfDescriptorsSince(port_, absl::Now() - kShortageMemory);
}

bool DedupServer::Ready() const {
  return storage_ == StorageHealth::kHealthy && !draining_ && !ShortOfDescriptors();
}

HttpResponse DedupServer::Probe(bool readiness) const {
  const StorageHealth storage = storage_;
  if (storage == StorageHealth::kFailed) {
    return {503, "text/plain; charset=utf-8", "storage failed\n"};
  }
  if (!readiness) return {200, "text/plain; charset=utf-8", "ok\n"};
  if (storage == StorageHealth::kOutOfSpace) {
    return {503, "text/plain; charset=utf-8", "storage out of space\n"};
  }
  if (draining_) return {503, "text/plain; charset=utf-8", "shutting down\n"};
  if (ShortOfDescriptors()) {
    return {503, "text/plain; charset=utf-8",
            "out of file descriptors: new connections are refused\n"};
  }
  return {200, "text/plain; charset=utf-8", "ok\n"};
}

HttpResponse DedupServer::Scrape() const {
  metrics_->SetReady(Ready());
  metrics_->SetOpenConnections(ConnectionGate::Get().OpenConnections(port_));
  metrics_->RecordTlsHandshakeFailures(FailedTlsHandshakes());
  std::vector<prometheus::MetricFamily> families = metrics_->registry()->Collect();
  std::vector<prometheus::MetricFamily> process = process_metrics_.Collect();
  families.insert(families.end(), process.begin(), process.end());
  if (replication_metrics_ != nullptr) {
    std::vector<prometheus::MetricFamily> replication = replication_metrics_->Collect();
    families.insert(families.end(), replication.begin(), replication.end());
  }
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                      prometheus::TextSerializer().Serialize(families)};
}

void DedupServer::Shutdown(absl::Duration grace) {
  if (stopped_) return;
  stopped_ = true;
  draining_ = true;
  monitor_.reset();
  if (replicator_ != nullptr) {
    // Hands the shards this node leads to up-to-date followers while the
    // replication service still answers them (docs/replication.md §6).
    replicator_->HandOff(std::min(grace / 2, absl::Seconds(5)));
  }
  // Clients hold Streams open for as long as they like: ended here, once
  // their batches are answered, they do not keep the shutdown waiting.
  if (service_ != nullptr) service_->CloseStreams();
  // And so do the other leaders' ShipStreams into this node.
  if (replication_service_ != nullptr) replication_service_->CloseStreams();
  // Health watchers are told NOT_SERVING, and their calls end.
  if (health_ != nullptr) health_->Shutdown();
  if (grpc_server_ != nullptr) {
    // Waits for in-flight calls until the deadline, then cancels them; the
    // workers keep running meanwhile, so every call gets its Finish.
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    grpc_server_->Wait();
    ConnectionGate::Get().Unguard(port_);
  }
  if (pool_ != nullptr) pool_->Shutdown();
  if (scan_pool_ != nullptr) scan_pool_->Shutdown();
  if (replication_pool_ != nullptr) replication_pool_->Shutdown();
  http_.reset();
  probes_.reset();
  if (replicator_ != nullptr) replicator_->Stop();
  grpc_server_.reset();
  service_.reset();
  replication_service_.reset();
  replication_pool_.reset();
  replication_metrics_.reset();
  replicator_.reset();
  replication_log_.reset();
  etcd_.reset();
  pool_.reset();
  scan_pool_.reset();
  store_.reset();  // Syncs the WAL and closes RocksDB.
}

}  // namespace dedup::server
