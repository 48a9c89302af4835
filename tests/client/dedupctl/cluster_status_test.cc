// `dedupctl cluster status`: against a FakeReplicatedCluster whose
// leadership the test sets, a real single dedupd, and the built dedupctl.
#include "cluster_status.h"

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "exit_codes.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/fake_replicated_cluster.h"
#include "tests/server/test_server.h"

namespace dedup::ctl {
namespace {

using client::test::FakeReplicatedCluster;

constexpr int kNodes = 3;
constexpr uint32_t kShards = 4;

struct CommandRun {
  int exit = -1;
  std::string out;
  std::string err;
};

CommandRun StatusCommand(const std::string& endpoint, bool json = false) {
  std::ostringstream out, err;
  CommandRun run;
  run.exit = RunClusterStatus(endpoint, nullptr, absl::Seconds(5), json, out, err);
  run.out = out.str();
  run.err = err.str();
  return run;
}

// The words of the table line of `shard`, or none.
std::vector<std::string> ShardLine(const std::string& out, uint32_t shard) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!words.empty() && words[0] == absl::StrCat(shard)) return words;
  }
  return {};
}

class ClusterStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ok());
    // Shard s led by node s mod 3, at epoch 2.
    for (uint32_t shard = 0; shard < kShards; ++shard) cluster_.SetLeader(shard, shard % kNodes);
  }
  const std::string& Address(int node) const { return cluster_.addresses()[node]; }

  FakeReplicatedCluster cluster_{kNodes, kShards};
};

TEST_F(ClusterStatusTest, HealthyClusterShowsEachShardsLeaderEpochAndReplicas) {
  cluster_.SetBehind(2, 5);
  const CommandRun run = StatusCommand(Address(1));
  EXPECT_EQ(run.exit, kExitOk) << run.err;
  EXPECT_EQ(run.err, "");
  EXPECT_TRUE(absl::StartsWith(run.out, "replicated: 3 nodes, 4 shards, replication factor 3"))
      << run.out;
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    const std::vector<std::string> words = ShardLine(run.out, shard);
    ASSERT_GE(words.size(), 3u) << run.out;
    EXPECT_EQ(words[1], Address(shard % kNodes)) << run.out;
    EXPECT_EQ(words[2], "2") << run.out;
  }
  EXPECT_TRUE(absl::StrContains(
      run.out, absl::StrCat(Address(2), " last_seq=95 applied_seq=95 behind=5 live")))
      << run.out;
}

// Only a shard's leader knows its replicas; the other nodes' answers for
// it carry none, so each shard's must come from its own leader's answer.
TEST_F(ClusterStatusTest, EachShardsReplicasAreTakenFromItsLeadersAnswer) {
  const ClusterStatus status = Summarize(AskEveryNode(Address(0), nullptr, absl::Seconds(5)));
  ASSERT_TRUE(status.replicated);
  ASSERT_EQ(status.shards.size(), kShards);
  for (const ShardRow& shard : status.shards) {
    EXPECT_EQ(shard.node, Address(shard.shard % kNodes));
    EXPECT_TRUE(shard.replicas_known) << shard.shard;
    EXPECT_EQ(shard.replicas.size(), static_cast<size_t>(kNodes)) << shard.shard;
  }
  EXPECT_TRUE(status.problems.empty());
}

TEST_F(ClusterStatusTest, ShardWithoutALeaderIsNamedAndFailsTheCommand) {
  cluster_.SetLeader(2, -1);
  const CommandRun run = StatusCommand(Address(0));
  EXPECT_EQ(run.exit, kExitClusterDegraded);
  EXPECT_TRUE(absl::StrContains(run.err, "shard 2 (epoch 3) has no leader")) << run.err;
  const std::vector<std::string> words = ShardLine(run.out, 2);
  ASSERT_GE(words.size(), 2u) << run.out;
  EXPECT_EQ(words[1], "none");
}

TEST_F(ClusterStatusTest, OneReplicaDownOfThreeLeavesAMajority) {
  cluster_.MarkReplicaDown(2);
  const CommandRun run = StatusCommand(Address(0));
  EXPECT_EQ(run.exit, kExitOk) << run.err;
  EXPECT_TRUE(absl::StrContains(
      run.out, absl::StrCat(Address(2), " last_seq=100 applied_seq=100 behind=0 DOWN")))
      << run.out;
}

TEST_F(ClusterStatusTest, FewerLiveReplicasThanAMajorityFailTheCommand) {
  cluster_.MarkReplicaDown(1);
  cluster_.MarkReplicaDown(2);
  const CommandRun run = StatusCommand(Address(0));
  EXPECT_EQ(run.exit, kExitClusterDegraded);
  // Shards 0 and 3 are led by node 0, which lives alone; nodes 1 and 2 lead
  // the others and each count itself and node 0.
  EXPECT_TRUE(absl::StrContains(run.err,
                                "shard 0 (epoch 2): 1 of 3 replicas live, fewer than a "
                                "majority (2)"))
      << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "shard 3 (epoch 2): 1 of 3"));
  EXPECT_FALSE(absl::StrContains(run.err, "shard 1 ")) << run.err;
}

TEST_F(ClusterStatusTest, LeaderThatDoesNotAnswerFailsTheCommand) {
  cluster_.Stop(1);
  const CommandRun run = StatusCommand(Address(0));
  EXPECT_EQ(run.exit, kExitClusterDegraded);
  EXPECT_TRUE(absl::StrContains(
      run.err, absl::StrCat("shard 1 (epoch 2): its leader ", Address(1), " did not answer")))
      << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, absl::StrCat("did not answer: ", Address(1))));
}

TEST_F(ClusterStatusTest, JsonHasEveryShardWithItsReplicas) {
  cluster_.SetLeader(3, -1);
  const CommandRun run = StatusCommand(Address(0), /*json=*/true);
  EXPECT_EQ(run.exit, kExitClusterDegraded);
  const nlohmann::json status = nlohmann::json::parse(run.out);
  EXPECT_EQ(status["replicated"], true);
  EXPECT_EQ(status["replication_factor"], 3);
  ASSERT_EQ(status["shards"].size(), kShards);
  EXPECT_EQ(status["shards"][1]["leader"], Address(1));
  EXPECT_EQ(status["shards"][1]["epoch"], 2);
  ASSERT_EQ(status["shards"][1]["replicas"].size(), 3u);
  EXPECT_EQ(status["shards"][1]["replicas"][0]["live"], true);
  EXPECT_TRUE(status["shards"][3]["leader"].is_null());
  ASSERT_EQ(status["problems"].size(), 1u);
}

// The nodes read the cluster at different times: the newest epoch any of
// them reports says who leads.
TEST(ClusterStatusSummaryTest, TheNewestEpochAnyNodeReportsNamesTheLeader) {
  auto map_of = [](uint32_t self, int32_t leader, uint64_t epoch) {
    v1::TopologyResponse map;
    map.set_shard_count(1);
    map.set_replication_factor(3);
    for (const char* node : {"a:1", "b:1", "c:1"}) map.add_nodes(node);
    map.set_node_index(self);
    v1::ShardLeader* shard = map.add_leaders();
    shard->set_leader(leader);
    shard->set_epoch(epoch);
    if (leader == static_cast<int32_t>(self)) {
      for (uint32_t node = 0; node < 3; ++node) {
        v1::ReplicaStatus* replica = shard->add_replicas();
        replica->set_node(node);
        replica->set_live(true);
      }
    }
    return map;
  };
  // a still thinks it leads at epoch 4; b and c know c leads at epoch 5.
  const ClusterStatus status =
      Summarize({{"a:1", map_of(0, 0, 4)}, {"b:1", map_of(1, 2, 5)}, {"c:1", map_of(2, 2, 5)}});
  ASSERT_EQ(status.shards.size(), 1u);
  EXPECT_EQ(status.shards[0].node, "c:1");
  EXPECT_EQ(status.shards[0].epoch, 5u);
  EXPECT_TRUE(status.shards[0].replicas_known);
  EXPECT_TRUE(status.problems.empty());
}

// Zones as the nodes registered them: the status names each zone's nodes
// and every shard that one zone's loss would leave without a majority,
// without calling the cluster degraded for it.
TEST(ClusterStatusSummaryTest, ZonesAndTheShardsOneZonesLossWouldTakeAreShown) {
  v1::TopologyResponse map;
  map.set_shard_count(3);
  map.set_replication_factor(3);
  for (const char* node : {"a:1", "b:1", "c:1", "d:1"}) map.add_nodes(node);
  for (const char* zone : {"z1", "z1", "z2", "z3"}) map.add_zones(zone);
  map.set_node_index(0);
  // Shard 0 on z1, z2, z3; shards 1 and 2 with two voters in z1.
  const std::vector<std::vector<uint32_t>> voters = {{0, 2, 3}, {0, 1, 2}, {1, 0, 3}};
  for (uint32_t s = 0; s < 3; ++s) {
    v1::ShardLeader* shard = map.add_leaders();
    shard->set_shard(s);
    shard->set_leader(0);
    shard->set_epoch(1);
    for (uint32_t node : voters[s]) {
      shard->add_voters(node);
      v1::ReplicaStatus* replica = shard->add_replicas();
      replica->set_node(node);
      replica->set_live(true);
    }
  }
  const ClusterStatus status = Summarize({{"a:1", map}});
  EXPECT_EQ(status.zones, (std::vector<std::string>{"z1", "z1", "z2", "z3"}));
  ASSERT_EQ(status.zone_risks.size(), 1u);
  EXPECT_EQ(status.zone_risks[0],
            "2 shard(s) would lose a majority of their replicas with zone \"z1\": 1, 2");
  EXPECT_TRUE(status.problems.empty());
  const std::string text = RenderText(status);
  EXPECT_TRUE(absl::StrContains(text, "zones: z1 (a:1, b:1); z2 (c:1); z3 (d:1)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "zone risk: 2 shard(s)")) << text;
  const nlohmann::json json = nlohmann::json::parse(RenderJson(status));
  EXPECT_EQ(json["zones"][3], "z3");
  EXPECT_EQ(json["zone_risks"].size(), 1u);

  // Without zones, nothing is said of them.
  map.clear_zones();
  const ClusterStatus blind = Summarize({{"a:1", map}});
  EXPECT_TRUE(blind.zone_risks.empty());
  EXPECT_FALSE(absl::StrContains(RenderText(blind), "zone"));
}

// How many shards each node leads, and how far the busiest is above an
// even share over every node listed, those that lead none included.
TEST(ClusterStatusSummaryTest, ShardsLedPerNodeAndTheBusiestsExcessAreShown) {
  v1::TopologyResponse map;
  map.set_shard_count(5);
  map.set_replication_factor(3);
  for (const char* node : {"a:1", "b:1", "c:1", "d:1"}) map.add_nodes(node);
  map.set_node_index(0);
  // a leads shards 0, 1 and 2; b leads 3 and 4; c and d lead none.
  const std::vector<int32_t> leaders = {0, 0, 0, 1, 1};
  for (uint32_t s = 0; s < leaders.size(); ++s) {
    v1::ShardLeader* shard = map.add_leaders();
    shard->set_shard(s);
    shard->set_leader(leaders[s]);
    shard->set_epoch(1);
  }
  const ClusterStatus status = Summarize({{"a:1", map}});
  EXPECT_EQ(status.leads, (std::vector<size_t>{3, 2, 0, 0}));
  EXPECT_NEAR(status.leader_spread_percent, 140.0, 1e-9);  // 3 against 5 / 4.
  const std::string text = RenderText(status);
  EXPECT_TRUE(absl::StrContains(
      text,
      "shards led: a:1 3, b:1 2, c:1 0, d:1 0 (the busiest leads 140.0% above an even share)"))
      << text;
  const nlohmann::json json = nlohmann::json::parse(RenderJson(status));
  EXPECT_EQ(json["shards_led"], nlohmann::json({3, 2, 0, 0}));
  EXPECT_NEAR(json["leader_spread_percent"].get<double>(), 140.0, 1e-9);
}

TEST(ClusterStatusSingleNodeTest, ServerThatIsNotReplicatedShowsItsStaticOwnership) {
  auto server = server::test::TestServer::Start(R"pb(durability: "buffered")pb", nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string endpoint = absl::StrCat("127.0.0.1:", (*server)->server().port());
  const CommandRun run = StatusCommand(endpoint);
  EXPECT_EQ(run.exit, kExitOk) << run.err;
  EXPECT_TRUE(absl::StartsWith(run.out, "not replicated: a single node owns all ")) << run.out;
  const std::vector<std::string> words = ShardLine(run.out, 0);
  ASSERT_EQ(words.size(), 2u) << run.out;
  EXPECT_EQ(words[1], endpoint);
}

TEST(ClusterStatusUnreachableTest, NoEndpointAnsweringIsAnError) {
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterStatus("127.0.0.1:1", nullptr, absl::Seconds(2), false, out, err),
            kExitError);
  EXPECT_EQ(out.str(), "");
  EXPECT_TRUE(absl::StrContains(err.str(), "127.0.0.1:1 did not answer")) << err.str();
}

// The built dedupctl, for its command line and exit codes.
int RunDedupctl(const std::string& arguments, std::string* out) {
  FILE* pipe = popen(absl::StrCat(DEDUPCTL_PATH, " ", arguments, " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(ClusterStatusTest, DedupctlExitsZeroForAHealthyClusterAndSixteenForADegradedOne) {
  std::string out;
  EXPECT_EQ(RunDedupctl(absl::StrCat("--endpoint=", Address(0), " cluster status"), &out), kExitOk);
  EXPECT_TRUE(absl::StartsWith(out, "replicated: ")) << out;
  cluster_.SetLeader(0, -1);
  out.clear();
  EXPECT_EQ(RunDedupctl(absl::StrCat("cluster status --json --endpoint=", Address(0)), &out),
            kExitClusterDegraded);
  EXPECT_TRUE(nlohmann::json::parse(out)["shards"][0]["leader"].is_null());
  out.clear();
  EXPECT_EQ(RunDedupctl("cluster leaders", &out), kExitUsage);
}

}  // namespace
}  // namespace dedup::ctl
