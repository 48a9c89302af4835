// A disk that fails its syncs under a replicated cluster's followers
// (docs/replication.md §2): the syncs of two nodes' data directories answer
// EIO, through tests/common/fail_syncs_preload.cc preloaded into every node
// and switched on per node by a marker file. Their writes still succeed,
// so only the order the code keeps protects a client: a follower answers
// a leader only for entries its sync covered, and a failed sync fails its
// store closed. A follower that answered first would let the healthy
// node's shards commit on a copy that is not on any disk.
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dedup/client/client.h"
#include "gtest/gtest.h"
#include "tests/blackbox/field_load.h"
#include "tests/blackbox/replicated_cluster.h"
#include "tests/common/http_scrape.h"

namespace dedup::blackbox {
namespace {

constexpr char kFailSyncsMarker[] = "dedup-test-fail-syncs";

// Sets an environment variable, which the nodes then spawned inherit,
// for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

class SyncFaultTest : public FieldExperimentTest {
 protected:
  // Claims each key at once, each within `timeout`; their outcomes.
  std::vector<absl::StatusOr<v1::ClaimResponse>> ClaimAll(const std::vector<std::string>& keys,
                                                          absl::Duration timeout) {
    client::CallOptions call;
    call.deadline = absl::Now() + timeout;
    std::vector<std::future<absl::StatusOr<v1::ClaimResponse>>> calls;
    for (const std::string& key : keys) {
      v1::ClaimRequest claim;
      claim.set_namespace_(kPaymentNs);
      claim.set_key(key);
      claim.set_owner("sync-fault");
      calls.push_back(client_->ClaimFuture(claim, call));
    }
    std::vector<absl::StatusOr<v1::ClaimResponse>> outcomes;
    for (auto& pending : calls) outcomes.push_back(pending.get());
    return outcomes;
  }

  // /healthz of a node's metrics port: the code, 0 when nothing answered.
  static int Health(int port) { return test::HttpGet(port, "/healthz").code; }
};

TEST_F(SyncFaultTest, FollowersWhoseSyncsFailAcknowledgeNothingAndFailClosed) {
  ScopedEnv preload("LD_PRELOAD", DEDUP_FAIL_SYNCS_PRELOAD);
  ReplicatedClusterOptions options;  // fsync, every shard on all three nodes.
  const std::vector<int> metrics_ports = FreePorts(3);
  for (int node = 0; node < 3; ++node) {
    options.node_flags[node] = {absl::StrCat("--metrics_listen=127.0.0.1:", metrics_ports[node])};
  }
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  const absl::Status replicated = cluster_->WaitForFullReplication(kCatchUp);
  ASSERT_TRUE(replicated.ok()) << replicated;

  // The preloaded library lets syncs through until told otherwise.
  for (const auto& outcome : ClaimAll(ProbeKeys(cluster_->shards(), "before-"), kCallTimeout)) {
    ASSERT_TRUE(outcome.ok()) << outcome.status() << "\n" << cluster_->OutputTails();
    EXPECT_EQ(outcome->outcome(), v1::ClaimResponse::ACQUIRED);
  }

  // Nothing written earlier may still sync on the followers: their first
  // sync after the fault must be the one for the claims below.
  EXPECT_EQ(AwaitAllApplied(*cluster_, absl::Seconds(10)), "")
      << "a replica has not applied its log";

  // Shard 0's leader keeps a good disk; the other two lose their syncs.
  // That leader can then commit only on a follower's word.
  const int healthy = cluster_->Leaders()[0].node;
  ASSERT_GE(healthy, 0);
  std::vector<int> failing;
  for (int node = 0; node < 3; ++node) {
    if (node == healthy) continue;
    failing.push_back(node);
    std::ofstream(cluster_->DataDir(node) + "/" + kFailSyncsMarker).put('\n');
  }
  std::cout << "node " << healthy << " leads shard 0 on a good disk; nodes " << failing[0]
            << " and " << failing[1] << " fail their syncs\n";

  // First the shards the healthy node leads, alone: a failing node's own
  // shards would otherwise make it sync, fail and stop taking appends
  // before their entries reach it. Then the rest.
  const std::vector<std::string> after = ProbeKeys(cluster_->shards(), "after-");
  const std::vector<Leadership> leaders = cluster_->Leaders();
  std::vector<std::string> first, then;
  for (size_t shard = 0; shard < after.size(); ++shard) {
    (leaders[shard].node == healthy ? first : then).push_back(after[shard]);
  }
  for (const std::vector<std::string>* keys : {&first, &then}) {
    const std::vector<absl::StatusOr<v1::ClaimResponse>> outcomes =
        ClaimAll(*keys, absl::Seconds(8));
    for (size_t i = 0; i < keys->size(); ++i) {
      EXPECT_FALSE(outcomes[i].ok())
          << (*keys)[i] << ": a claim was acknowledged though two of its three copies "
          << "could not be synced: " << outcomes[i]->ShortDebugString();
    }
  }

  // Each failing node failed its store closed, so that it gets restarted;
  // the healthy one stays up.
  for (int node : failing) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (Health(metrics_ports[node]) != 503 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    EXPECT_EQ(Health(metrics_ports[node]), 503)
        << "node " << node << " serves on after a failed sync\n"
        << cluster_->Output(node);
  }
  EXPECT_EQ(Health(metrics_ports[healthy]), 200) << cluster_->Output(healthy);
}

}  // namespace
}  // namespace dedup::blackbox
