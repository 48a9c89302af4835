// A whole zone lost (docs/elastic.md §2, "Zones"): six nodes in three
// zones of two, each node in a network namespace of its own (network_lab.h),
// at the shard count and lease a new cluster has (1,024 shards, 3 s), under
// the field experiment (field_load.h). Every node names its zone, so the
// new cluster places each shard's three replicas in three zones; then one
// zone is cut off from the other two and from etcd, both ways, with
// nftables.
//
// What it holds the cluster to:
//  - before the cut, no shard has a majority of its voters in one zone;
//  - while the zone is cut off, every shard is led by a node outside it;
//  - no payment is charged twice, and the history of every call keeps the
//    promises of tests/common/history_checker.h;
//  - healed, the zone's nodes catch up and the load goes on.
// With zone-blind placement (nodes s..s+2 for shard s) a third of the
// shards have two voters in one zone, and a cut of that zone leaves them
// without a leader: the test fails.
#include <algorithm>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/examples/payment_pipeline.h"
#include "gtest/gtest.h"
#include "server/replication/placement.h"
#include "tests/blackbox/field_load.h"
#include "tests/blackbox/leader_watch.h"
#include "tests/blackbox/network_lab.h"
#include "tests/blackbox/pipeline_history.h"
#include "tests/blackbox/placement.h"
#include "tests/blackbox/replicated_cluster.h"

namespace dedup::blackbox {
namespace {

// Nodes 2z and 2z+1 are in zone z.
const server::replication::Zones kZones = {"zone-a", "zone-a", "zone-b",
                                           "zone-b", "zone-c", "zone-c"};
// How long the zone stays cut off: past the time its shards need to be led
// elsewhere.
constexpr absl::Duration kCut = absl::Seconds(10);

class ZoneLossTest : public NetworkExperimentTest {
 protected:
  ZoneLossTest() : NetworkExperimentTest(static_cast<int>(kZones.size())) {}

  // Cuts `zone`'s nodes off from every other node and from etcd, both ways.
  void CutOffZone(const std::vector<int>& zone) {
    std::vector<int> others;
    for (int node = 0; node < static_cast<int>(kZones.size()); ++node) {
      if (std::find(zone.begin(), zone.end(), node) == zone.end()) others.push_back(node);
    }
    for (int node : zone) {
      const absl::Status cut = lab_->CutOffWithEtcd(node, others);
      ASSERT_TRUE(cut.ok()) << cut;
    }
  }
};

TEST_F(ZoneLossTest, AZoneCutOffLeavesEveryShardLedAndLosesNothing) {
  ReplicatedClusterOptions options;
  options.nodes = static_cast<int>(kZones.size());
  options.shards = 1024;
  options.leader_lease = absl::Seconds(3);
  options.network = lab_.get();
  for (int node = 0; node < options.nodes; ++node) {
    options.node_flags[node] = {absl::StrCat("--zone=", kZones[node])};
  }
  ASSERT_NO_FATAL_FAILURE(StartCluster(options, 0, absl::Seconds(120)));

  const std::optional<v1::TopologyResponse> placement = NewestPlacement(cluster_->AskTopology());
  ASSERT_TRUE(placement.has_value()) << "no node answered for the placement";
  std::vector<std::string> exposed;
  for (const v1::ShardLeader& shard : placement->leaders()) {
    const std::vector<uint32_t> voters(shard.voters().begin(), shard.voters().end());
    std::string zone;
    if (server::replication::ExposedToOneZone(voters, kZones, &zone)) {
      exposed.push_back(absl::StrCat(shard.shard(), " (", zone, ")"));
    }
  }
  EXPECT_TRUE(exposed.empty()) << exposed.size()
                               << " shards have a majority of their voters in one zone, first "
                               << exposed.front();

  LeaderWatch watch(cluster_.get());
  FieldLoad load(client_.get(), Payments("zone-loss"));
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(200));

  const std::vector<int> lost = {0, 1};  // zone-a
  const absl::Time cut_at = absl::Now();
  ASSERT_NO_FATAL_FAILURE(CutOffZone(lost));
  std::cout << "zone-a (nodes 0 and 1) cut off from the other zones and from etcd\n";
  ASSERT_TRUE(AwaitEveryShardLedOutside(lost, cut_at).has_value());
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(200));
  absl::SleepFor(std::max(absl::ZeroDuration(), cut_at + kCut - absl::Now()));
  for (int node : lost) {
    const absl::Status healed = lab_->Heal(node);
    ASSERT_TRUE(healed.ok()) << healed;
  }
  // Healed, the zone's nodes catch up, and the load goes on.
  ASSERT_NO_FATAL_FAILURE(AwaitCaughtUpUnderLoad());
  // A call already waiting on a node of the zone when it was cut off waits
  // out its deadline; its payment may go uncharged. None may be charged
  // twice.
  FinishWithoutDoubleCharges(load, watch);
}

}  // namespace
}  // namespace dedup::blackbox
