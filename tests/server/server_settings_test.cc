// Configuration bounds (design.md §10): every limit has a default, a range
// named in the error, and no duration can push "now + duration" near
// int64 overflow.

#include "server/server_settings.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dedup::server {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ServerSettings> Resolve(const std::string& text) {
  absl::StatusOr<v1::ServerConfig> config = ParseConfigText(text);
  if (!config.ok()) return config.status();
  return ResolveSettings(*config);
}

TEST(ServerSettingsTest, LimitsHaveTheirDefaults) {
  absl::StatusOr<ServerSettings> settings = Resolve("");
  ASSERT_TRUE(settings.ok()) << settings.status();
  const ServerLimits& limits = settings->limits;
  EXPECT_EQ(limits.max_queued_tasks, 1024u);
  EXPECT_EQ(limits.max_receive_message_bytes, 4u << 20);
  EXPECT_EQ(limits.max_send_message_bytes, 4u << 20);
  EXPECT_EQ(limits.max_concurrent_streams, 100u);
  EXPECT_EQ(limits.keepalive_time_ms, 60'000);
  EXPECT_EQ(limits.keepalive_timeout_ms, 20'000);
  EXPECT_EQ(limits.min_client_ping_interval_ms, 10'000);
  EXPECT_EQ(limits.max_batch_answer_bytes, 3u << 20);
  EXPECT_EQ(limits.max_stream_batches, 16u);
  EXPECT_EQ(limits.max_stream_answer_bytes, 8u << 20);
  EXPECT_EQ(limits.scan_max_examined, 4096u);
  EXPECT_EQ(limits.scan_workers, 2u);
  EXPECT_EQ(limits.max_open_streams, 128u);
  EXPECT_EQ(limits.max_connection_age_ms, 3600'000);
  EXPECT_EQ(limits.max_connection_age_grace_ms, 30'000);
  EXPECT_EQ(limits.max_connections, 4096u);
  EXPECT_EQ(limits.max_connections_per_address, 512u);
  EXPECT_EQ(limits.handshake_timeout_ms, 10'000);
  EXPECT_EQ(limits.max_open_streams_per_identity, 32u);
  EXPECT_EQ(limits.max_queued_tasks_per_identity, 256u);
  EXPECT_EQ(limits.max_operations_per_second_per_identity, 0u) << "no rate";
}

// Three nodes, each shard on all three, coordinated by etcd.
constexpr char kReplicated[] = R"pb(
  durability: "buffered"
  cluster {
    nodes: [ "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3" ]
    replication_factor: 3
    etcd_endpoints: "127.0.0.1:2379"
  })pb";

TEST(ServerSettingsTest, ExecutionIsInlineUnlessWorkersAreAskedFor) {
  absl::StatusOr<ServerSettings> settings = Resolve(R"pb(durability: "buffered")pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->execution, Execution::kInline) << "auto, buffered single node";
  EXPECT_FALSE(settings->store.group_sync) << "buffered syncs in the background";
  settings = Resolve(R"pb(durability: "fsync")pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->execution, Execution::kInline) << "auto, fsync single node";
  EXPECT_TRUE(settings->store.group_sync) << "inline fsync answers after the store's group sync";
  settings = Resolve(R"pb(durability: "fsync" execution: "workers")pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->execution, Execution::kWorkers);
  EXPECT_FALSE(settings->store.group_sync) << "a worker syncs its own write";
  settings = Resolve(kReplicated);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->execution, Execution::kInline)
      << "auto, buffered replicated: Stream batches wait for no follower on gRPC's threads";
  EXPECT_FALSE(settings->store.group_sync);
  settings = Resolve(absl::StrReplaceAll(kReplicated, {{"buffered", "fsync"}}));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->execution, Execution::kInline)
      << "auto, fsync replicated: a thread of the replicator syncs the log's appends";
  EXPECT_FALSE(settings->store.group_sync) << "the replication log syncs its own appends";
  settings = Resolve(R"pb(durability: "buffered" execution: "workers")pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->execution, Execution::kWorkers);

  settings = Resolve(absl::StrCat(kReplicated, R"pb(execution: "inline")pb"));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->execution, Execution::kInline);
  settings = Resolve(absl::StrCat(absl::StrReplaceAll(kReplicated, {{"buffered", "fsync"}}),
                                  R"pb(execution: "inline")pb"));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->execution, Execution::kInline);
  EXPECT_FALSE(settings->store.group_sync);
  EXPECT_THAT(Resolve(R"pb(execution: "threads")pb").status().message(),
              HasSubstr("execution: must be \"auto\", \"workers\" or \"inline\""));
}

TEST(ServerSettingsTest, AZoneIsANameOfLettersDigitsDotsUnderscoresAndDashes) {
  absl::StatusOr<ServerSettings> settings = Resolve(R"pb(cluster { zone: "eu-west-1a" })pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->zone, "eu-west-1a");
  EXPECT_EQ(Resolve("").value().zone, "");
  EXPECT_THAT(Resolve(R"pb(cluster { zone: "rack 7" })pb").status().message(),
              HasSubstr("cluster.zone: letters, digits"));
  EXPECT_THAT(
      Resolve(absl::StrCat("cluster { zone: \"", std::string(64, 'z'), "\" }")).status().message(),
      HasSubstr("at most 63"));
}

TEST(ServerSettingsTest, LimitsAreReadFromTheConfig) {
  absl::StatusOr<ServerSettings> settings =
      Resolve(R"pb(limits {
                     max_queued_tasks: 7
                     keepalive_time: "5m"
                     max_stream_batches: 2
                     max_operations_per_second_per_identity: 20000
                   }
                   auth { grants { identity: "a" namespaces: "*" roles: "claim" } })pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->limits.max_operations_per_second_per_identity, 20000u);
  EXPECT_THAT(DescribeSettings(*settings),
              HasSubstr("max_operations_per_second_per_identity=20000"));
  EXPECT_EQ(settings->limits.max_queued_tasks, 7u);
  EXPECT_EQ(settings->limits.keepalive_time_ms, 300'000);
  EXPECT_EQ(settings->limits.max_stream_batches, 2u);
}

TEST(ServerSettingsTest, ALimitOutOfRangeIsRefusedNamingIt) {
  absl::StatusOr<ServerSettings> settings = Resolve("limits { max_stream_batches: 5000 }");
  EXPECT_THAT(settings.status().message(), HasSubstr("limits.max_stream_batches: must be 1..1024"));
  settings = Resolve("limits { max_send_message_bytes: 1048576 }");
  EXPECT_THAT(settings.status().message(), HasSubstr("limits.max_batch_answer_bytes"))
      << "the default answer cap no longer fits in one message";
  settings = Resolve("limits { max_connections: 100 max_connections_per_address: 200 }");
  EXPECT_THAT(settings.status().message(),
              HasSubstr("limits.max_connections_per_address: must be 1..100, got 200"));
  settings = Resolve("limits { max_open_streams: 8 max_open_streams_per_identity: 9 }");
  EXPECT_THAT(settings.status().message(),
              HasSubstr("limits.max_open_streams_per_identity: must be 1..8, got 9"));
  settings = Resolve("limits { max_operations_per_second_per_identity: 1000 }");
  EXPECT_THAT(settings.status().message(),
              HasSubstr("limits.max_operations_per_second_per_identity: set without auth.grants"));
  settings = Resolve("limits { max_operations_per_second_per_identity: 100000001 }");
  EXPECT_THAT(settings.status().message(),
              HasSubstr("limits.max_operations_per_second_per_identity: must be 0 (no rate) to "
                        "100000000, got 100000001"));
  settings = Resolve(R"pb(limits { handshake_timeout: "50ms" })pb");
  EXPECT_THAT(settings.status().message(),
              HasSubstr("limits.handshake_timeout: must be at least 100ms"));
  // Unset, a share is at most the whole.
  settings = Resolve("limits { max_connections: 100 max_open_streams: 8 }");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->limits.max_connections_per_address, 100u);
  EXPECT_EQ(settings->limits.max_open_streams_per_identity, 8u);
}

TEST(ServerSettingsTest, TypedGrantIdentitiesAreCheckedAndUntyped) {
  absl::StatusOr<ServerSettings> settings = Resolve(R"pb(
    auth {
      grants { identity: "uri:spiffe://prod/a" namespaces: "*" roles: "claim" }
      grants { identity: "dns:worker.prod.example" namespaces: "*" roles: "claim" }
    }
  )pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->auth.grants[0].identity, "spiffe://prod/a");
  EXPECT_EQ(settings->auth.grants[1].identity, "worker.prod.example");
  settings = Resolve(
      R"pb(auth { grants { identity: "dns:spiffe://prod/a" namespaces: "*" roles: "claim" } })pb");
  EXPECT_THAT(settings.status().message(),
              HasSubstr("auth.grants[0].identity: \"dns:spiffe://prod/a\" is not a host name"));
  settings =
      Resolve(R"pb(auth { grants { identity: "uri:worker" namespaces: "*" roles: "claim" } })pb");
  EXPECT_THAT(settings.status().message(),
              HasSubstr("auth.grants[0].identity: \"uri:worker\" is not a URI with a scheme"));
}

TEST(ServerSettingsTest, MemtableIsAHashUnlessAskedOtherwise) {
  absl::StatusOr<ServerSettings> settings = Resolve("");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_TRUE(settings->store.hash_memtable) << "a single node";
  EXPECT_THAT(DescribeSettings(*settings), HasSubstr("memtable=hash"));
  settings = Resolve(R"pb(memtable: "auto")pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_TRUE(settings->store.hash_memtable);
  settings = Resolve(R"pb(memtable: "skiplist")pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_FALSE(settings->store.hash_memtable);
  EXPECT_THAT(DescribeSettings(*settings), HasSubstr("memtable=skiplist"));
  settings = Resolve(R"pb(memtable: "vector")pb");
  EXPECT_EQ(settings.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(settings.status().message(),
              HasSubstr("memtable: must be \"auto\", \"skiplist\" or \"hash\""));

  // A replicated node too: its moves walk the records once, on one
  // iterator (ReplicationLog::RecordWalk).
  settings = Resolve(kReplicated);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_TRUE(settings->store.hash_memtable);
  settings = Resolve(absl::StrCat(kReplicated, R"pb(memtable: "skiplist")pb"));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_FALSE(settings->store.hash_memtable);
}

TEST(ServerSettingsTest, LeaderLeaseDefaultsToThreeSecondsAndIsAtLeastTwo) {
  // Three seconds: a dead or hung leader's shards are led again within 5 s
  // (bench/failover), and a leader keeps its lease through two lost
  // keep-alives.
  absl::StatusOr<ServerSettings> settings = Resolve(kReplicated);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->leader_lease_ms, 3'000);
  auto with_lease = [](absl::string_view lease) {
    return absl::StrCat(R"pb(cluster { nodes: [ "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3" ]
                                       replication_factor: 3
                                       etcd_endpoints: "127.0.0.1:2379"
                                       leader_lease: ")pb",
                        lease, R"pb(" })pb");
  };
  settings = Resolve(with_lease("10s"));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->leader_lease_ms, 10'000);
  EXPECT_THAT(Resolve(with_lease("1s")).status().message(),
              HasSubstr("cluster.leader_lease: must be at least 2000ms"));
}

TEST(ServerSettingsTest, ClockStepRuleIsReadFromTheConfigWithinItsBounds) {
  absl::StatusOr<ServerSettings> defaults = Resolve("");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->store.clock_step_tolerance_ms, 1'000);
  EXPECT_EQ(defaults->store.clock_step_confirmation_ms, 600'000);
  absl::StatusOr<ServerSettings> settings = Resolve(R"pb(clock_step_tolerance: "5s"
                                                         clock_step_confirmation: "1h")pb");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->store.clock_step_tolerance_ms, 5'000);
  EXPECT_EQ(settings->store.clock_step_confirmation_ms, 3'600'000);
  EXPECT_THAT(Resolve(R"pb(clock_step_tolerance: "50ms")pb").status().message(),
              HasSubstr("clock_step_tolerance: must be at least 100ms"));
  EXPECT_THAT(Resolve(R"pb(clock_step_tolerance: "2h")pb").status().message(),
              HasSubstr("clock_step_tolerance: must be at most 1h"));
  EXPECT_THAT(Resolve(R"pb(clock_step_confirmation: "25h")pb").status().message(),
              HasSubstr("clock_step_confirmation: must be at most 24h"));
}

TEST(ServerSettingsTest, DurationsAboveTenYearsAreRefused) {
  for (const std::string& text : {
           std::string(R"pb(default_policy { retention_default: "87601h" })pb"),
           std::string(R"pb(abandoned_grace: "2562047h")pb"),
           std::string(R"pb(limits { keepalive_time: "100000h" })pb"),
       }) {
    absl::StatusOr<ServerSettings> settings = Resolve(text);
    EXPECT_FALSE(settings.ok()) << text;
    EXPECT_THAT(settings.status().message(), HasSubstr("(10 years)")) << text;
  }
  EXPECT_TRUE(Resolve(R"pb(default_policy { retention_default: "87600h" })pb").ok())
      << "exactly ten years is allowed";
}

}  // namespace
}  // namespace dedup::server

namespace dedup::server {
namespace {

TEST(ServerSettingsTest, PlaintextOutsideLoopbackNeedsTheInsecureAcknowledgement) {
  for (const char* listen : {"127.0.0.1:7400", "127.9.0.1:0", "[::1]:7400", "localhost:7400"}) {
    absl::StatusOr<ServerSettings> settings = Resolve(absl::StrCat("listen: '", listen, "'"));
    ASSERT_TRUE(settings.ok()) << listen << ": " << settings.status();
    EXPECT_FALSE(settings->insecure_plaintext) << listen;
  }
  for (const char* listen : {"0.0.0.0:7400", "10.0.0.5:7400", "[::]:7400", "dedupd-0:7400"}) {
    absl::StatusOr<ServerSettings> settings = Resolve(absl::StrCat("listen: '", listen, "'"));
    EXPECT_THAT(settings.status().message(), HasSubstr("is not a loopback address")) << listen;
    settings = Resolve(absl::StrCat("listen: '", listen, "' insecure: true"));
    ASSERT_TRUE(settings.ok()) << listen << ": " << settings.status();
    EXPECT_TRUE(settings->insecure_plaintext) << listen;
  }
}

TEST(ServerSettingsTest, TlsNeedsCertAndKeyTogetherAndAllowsAnyAddress) {
  EXPECT_THAT(Resolve("tls { cert: 'c.pem' }").status().message(),
              HasSubstr("tls: cert and key must be set together"));
  EXPECT_THAT(Resolve("tls { ca: 'ca.pem' }").status().message(),
              HasSubstr("tls.ca: set without tls.cert and tls.key"));
  absl::StatusOr<ServerSettings> settings =
      Resolve("listen: '0.0.0.0:7400' tls { cert: 'c.pem' key: 'k.pem' ca: 'ca.pem' }");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_TRUE(settings->tls.mutual());
  EXPECT_FALSE(settings->insecure_plaintext);
}

TEST(ServerSettingsTest, AuthIsOffWithoutGrantsAndEachGrantIsChecked) {
  absl::StatusOr<ServerSettings> off = Resolve("");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->auth.enabled());

  absl::StatusOr<ServerSettings> on =
      Resolve(R"pb(auth {
                     tokens_file: "tokens"
                     refresh_interval: "2s"
                     grants {
                       identity: "spiffe://prod/a"
                       namespaces: "payments"
                       namespaces: "refunds"
                       roles: "claim"
                     }
                     grants { identity: "ops" namespaces: "*" roles: "admin" roles: "claim" }
                     grants { identity: "audit" namespaces: "payments" roles: "read" roles: "scan" }
                     grants { identity: "mover" namespaces: "*" roles: "cluster" }
                   })pb");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->auth.enabled());
  EXPECT_EQ(on->auth.tokens_file, "tokens");
  EXPECT_EQ(on->auth.refresh_interval_ms, 2000);
  ASSERT_EQ(on->auth.grants.size(), 4u);
  EXPECT_EQ(on->auth.grants[0].namespaces, (std::vector<std::string>{"payments", "refunds"}));
  EXPECT_TRUE(on->auth.grants[0].claim);
  EXPECT_FALSE(on->auth.grants[0].read || on->auth.grants[0].scan || on->auth.grants[0].cluster);
  // "admin" is scan and cluster together.
  EXPECT_TRUE(on->auth.grants[1].claim && on->auth.grants[1].scan && on->auth.grants[1].cluster);
  EXPECT_TRUE(on->auth.grants[2].read && on->auth.grants[2].scan);
  EXPECT_FALSE(on->auth.grants[2].claim || on->auth.grants[2].cluster);
  EXPECT_TRUE(on->auth.grants[3].cluster);
  EXPECT_FALSE(on->auth.grants[3].scan || on->auth.grants[3].read || on->auth.grants[3].claim);

  const struct {
    const char* config;
    const char* error;
  } kRefused[] = {
      {"auth { grants { namespaces: '*' roles: 'claim' } }", "auth.grants[0].identity: empty"},
      {"auth { grants { identity: 'a' roles: 'claim' } }", "auth.grants[0].namespaces: name at"},
      {"auth { grants { identity: 'a' namespaces: 'Bad NS' roles: 'claim' } }",
       "auth.grants[0].namespaces[0]"},
      {"auth { grants { identity: 'a' namespaces: 'payments' roles: 'cluster' } }",
       "auth.grants[0].roles[0]: \"cluster\" moves replicas of every namespace"},
      {"auth { grants { identity: 'a' namespaces: '*' roles: 'write' } }",
       "auth.grants[0].roles[0]: must be \"claim\", \"read\", \"scan\", \"cluster\", \"admin\" "
       "(scan and cluster) or \"replica\", got \"write\""},
      {"auth { grants { identity: 'a' namespaces: '*' } }", "auth.grants[0].roles: name at"},
      {"auth { tokens_file: 'tokens' }", "auth.tokens_file: set without auth.grants"},
      {"listen: '0.0.0.0:7400' insecure: true auth { tokens_file: 'tokens' grants { identity: "
       "'a' namespaces: '*' roles: 'claim' } }",
       "auth.tokens_file: bearer tokens over plaintext"},
  };
  for (const auto& refused : kRefused) {
    absl::StatusOr<ServerSettings> settings = Resolve(refused.config);
    EXPECT_EQ(settings.status().code(), absl::StatusCode::kInvalidArgument) << refused.config;
    EXPECT_THAT(settings.status().message(), HasSubstr(refused.error)) << refused.config;
  }
}

}  // namespace
}  // namespace dedup::server
