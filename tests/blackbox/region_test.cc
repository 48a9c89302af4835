// One cluster stretched over three regions (docs/regions.md, design (a)),
// emulated in a network lab (network_lab.h): three nodes, one per region,
// each naming its region as its zone, so every shard has a voter in each.
// The regions are as far apart as docs/regions.md assumes, in round trips:
//
//              region-a  region-b  region-c
//   region-a       1        30        60       (ms)
//   region-b      30         1        60
//   region-c      60        60         1
//
// The lab's hub (this test's client and etcd) is in region-a. Each node's
// delay proxy holds back what it sends by half the round trip to another
// node (that node's proxy delays the way back) and by the whole round trip
// to the hub, which delays nothing.
//
// What it measures, printed and, when DEDUP_REGION_REPORT names a file,
// appended to it as one JSON line (bench/regions/run):
//  - claim latency from region-a at the default shard count and lease,
//    p50 and p99, overall and by the region of the shard's leader, and
//    claims per second with DEDUP_REGION_CALLERS callers (16) over
//    DEDUP_REGION_SECONDS (5); DEDUP_REGION_NO_DELAY=1 measures the same
//    lab with every delay 0;
//  - how long region-c's shards go without a leader when it is cut off.
// What it holds the cluster to, as every network test does: while region-c
// is cut off every shard is led in another region within the failover
// bound; no payment of the field experiment is charged twice and the
// history of every call is consistent; healed, region-c catches up and
// each node leads within 10% of an even share again.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/examples/payment_pipeline.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"
#include "tests/blackbox/field_load.h"
#include "tests/blackbox/leader_watch.h"
#include "tests/blackbox/network_lab.h"
#include "tests/blackbox/placement.h"
#include "tests/blackbox/replicated_cluster.h"

namespace dedup::blackbox {
namespace {

const std::vector<std::string> kRegions = {"region-a", "region-b", "region-c"};
// Round trips between the regions (and inside one), in milliseconds.
constexpr int kRoundTripMs[3][3] = {{1, 30, 60}, {30, 1, 60}, {60, 60, 1}};
// Where the hub is: the test's client and etcd.
constexpr int kHubRegion = 0;
constexpr uint32_t kShards = 1024;  // A new cluster's default.
constexpr char kLatencyNs[] = "region-latency";

int EnvInt(const char* name, int otherwise) {
  const char* text = std::getenv(name);
  int value = 0;
  if (text == nullptr || !absl::SimpleAtoi(text, &value) || value <= 0) return otherwise;
  return value;
}

// The q-th quantile of `sorted`, in milliseconds.
double QuantileMs(const std::vector<absl::Duration>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t at = std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()));
  return absl::ToDoubleMilliseconds(sorted[at]);
}

struct Latencies {
  std::vector<absl::Duration> all;
  std::map<int, std::vector<absl::Duration>> by_leader;  // Leader's node -> claims.
  int64_t failed = 0;
};

class RegionTest : public NetworkExperimentTest {
 protected:
  RegionTest() : NetworkExperimentTest(static_cast<int>(kRegions.size())) {}

  // Node i is in region i. With DEDUP_REGION_NO_DELAY=1 every delay is 0,
  // the proxies still in the way: the baseline the regions are compared to.
  void EmulateRegions() {
    const bool none = EnvInt("DEDUP_REGION_NO_DELAY", 0) == 1;
    for (int node = 0; node < lab_->nodes(); ++node) {
      std::map<std::string, absl::Duration> by_host;
      for (int peer = 0; peer < lab_->nodes(); ++peer) {
        if (peer != node) {
          by_host[lab_->NodeHost(peer)] =
              none ? absl::ZeroDuration() : absl::Milliseconds(kRoundTripMs[node][peer]) / 2;
        }
      }
      const absl::Duration to_hub =
          none ? absl::ZeroDuration() : absl::Milliseconds(kRoundTripMs[node][kHubRegion]);
      by_host[NetworkLab::HubHost()] = to_hub;
      by_host[NetworkLab::EtcdHost()] = to_hub;
      const absl::Status delayed = lab_->DelayTo(node, by_host, absl::ZeroDuration());
      ASSERT_TRUE(delayed.ok()) << delayed;
    }
  }

  // Waits, up to `timeout`, until every shard is led by its first voter,
  // where placement spreads leadership over the regions, so that each
  // claim is counted under the region that led its shard throughout.
  // Measuring earlier is not wrong, only less exact: it says so.
  void AwaitPreferredLeaders(absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    int elsewhere = 0;
    while (absl::Now() < give_up) {
      const std::optional<v1::TopologyResponse> placement =
          NewestPlacement(cluster_->AskTopology());
      const std::vector<Leadership> leaders = cluster_->Leaders();
      elsewhere = placement.has_value() ? 0 : static_cast<int>(kShards);
      if (placement.has_value()) {
        for (const v1::ShardLeader& shard : placement->leaders()) {
          if (shard.voters().empty() || shard.shard() >= leaders.size() ||
              leaders[shard.shard()].node != static_cast<int>(shard.voters(0))) {
            ++elsewhere;
          }
        }
      }
      if (elsewhere == 0) return;
      absl::SleepFor(absl::Milliseconds(200));
    }
    std::cout << elsewhere << " shards not yet led by their first voter after "
              << absl::FormatDuration(timeout) << "; measuring anyway\n";
  }

  // `callers` threads claim and complete fresh keys for `duration`; the
  // claims' latencies, by the node that led the key's shard when it began.
  Latencies MeasureClaims(int callers, absl::Duration duration) {
    const std::vector<Leadership> leaders = cluster_->Leaders();
    Latencies latencies;
    absl::Mutex mu;
    std::atomic<int64_t> next{0};
    const absl::Time end = absl::Now() + duration;
    std::vector<std::thread> threads;
    for (int caller = 0; caller < callers; ++caller) {
      threads.emplace_back([&, caller] {
        while (absl::Now() < end) {
          v1::ClaimRequest claim;
          claim.set_namespace_(kLatencyNs);
          claim.set_key(absl::StrCat("k-", next.fetch_add(1)));
          claim.set_owner(absl::StrCat("caller-", caller));
          const absl::Time start = absl::Now();
          absl::StatusOr<v1::ClaimResponse> claimed = client_->Claim(claim);
          const absl::Duration took = absl::Now() - start;
          bool ok = claimed.ok() && claimed->outcome() == v1::ClaimResponse::ACQUIRED;
          if (ok) {
            v1::CompleteRequest complete;
            complete.set_namespace_(kLatencyNs);
            complete.set_key(claim.key());
            complete.set_token(claimed->token());
            ok = client_->Complete(complete).ok();
          }
          const uint32_t shard = storage::ShardOf(kLatencyNs, claim.key(), kShards);
          absl::MutexLock lock(&mu);
          if (!ok) {
            ++latencies.failed;
            continue;
          }
          latencies.all.push_back(took);
          latencies.by_leader[leaders[shard].node].push_back(took);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    std::sort(latencies.all.begin(), latencies.all.end());
    for (auto& [node, claims] : latencies.by_leader) std::sort(claims.begin(), claims.end());
    return latencies;
  }
};

TEST_F(RegionTest, AClusterOverThreeRegionsLosesNothingWhenOneIsCutOff) {
  ASSERT_NO_FATAL_FAILURE(EmulateRegions());
  ReplicatedClusterOptions options;
  options.nodes = static_cast<int>(kRegions.size());
  options.shards = kShards;
  options.leader_lease = absl::Seconds(3);  // dedupd's default.
  options.network = lab_.get();
  for (int node = 0; node < options.nodes; ++node) {
    options.node_flags[node] = {absl::StrCat("--zone=", kRegions[node])};
  }
  ASSERT_NO_FATAL_FAILURE(StartCluster(options, 0, absl::Seconds(120)));

  AwaitPreferredLeaders(absl::Seconds(60));
  const int callers = EnvInt("DEDUP_REGION_CALLERS", 16);
  const absl::Duration duration = absl::Seconds(EnvInt("DEDUP_REGION_SECONDS", 5));
  const Latencies latencies = MeasureClaims(callers, duration);
  ASSERT_FALSE(latencies.all.empty()) << "no claim succeeded";
  EXPECT_EQ(latencies.failed, 0) << "claims or completes failed with no fault injected";
  const double per_second = latencies.all.size() / absl::ToDoubleSeconds(duration);
  std::string by_region;
  std::vector<std::string> json_by_region;
  for (const auto& [node, claims] : latencies.by_leader) {
    const std::string region = node >= 0 ? kRegions[node] : "no-leader";
    absl::StrAppendFormat(&by_region, "  led in %s: %d claims, p50 %.1f ms, p99 %.1f ms\n", region,
                          claims.size(), QuantileMs(claims, 0.5), QuantileMs(claims, 0.99));
    json_by_region.push_back(absl::StrFormat(R"("%s":{"claims":%d,"p50_ms":%.2f,"p99_ms":%.2f})",
                                             region, claims.size(), QuantileMs(claims, 0.5),
                                             QuantileMs(claims, 0.99)));
  }
  std::cout
      << absl::StreamFormat(
             "claims from region-a, %d callers, %s: %.0f claims/s, p50 %.1f ms, p99 %.1f ms\n",
             callers, absl::FormatDuration(duration), per_second, QuantileMs(latencies.all, 0.5),
             QuantileMs(latencies.all, 0.99))
      << by_region;

  // Region-c, farthest from the others, cut off from them and from etcd.
  LeaderWatch watch(cluster_.get());
  FieldLoad load(client_.get(), Payments("regions", 500));
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(100, absl::Seconds(60)));
  constexpr int kCut = 2;
  // Region-c leads its share, so that the cut takes shards from it.
  const std::vector<Leadership> before = cluster_->Leaders();
  const auto led_by_cut = std::count_if(before.begin(), before.end(),
                                        [](const Leadership& l) { return l.node == kCut; });
  ASSERT_GE(led_by_cut, static_cast<long>(0.9 * kShards / kRegions.size()))
      << "region-c leads too few shards for its cut to mean anything: " << Describe(before);
  const absl::Time cut_at = absl::Now();
  const absl::Status cut = lab_->CutOffWithEtcd(kCut, {0, 1});
  ASSERT_TRUE(cut.ok()) << cut;
  const std::optional<absl::Duration> led_elsewhere = AwaitEveryShardLedOutside({kCut}, cut_at);
  ASSERT_TRUE(led_elsewhere.has_value());
  const absl::Duration failover = *led_elsewhere;
  std::cout << "region-c cut off: every shard led in region-a or region-b "
            << absl::FormatDuration(failover) << " into the cut\n";
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(100, absl::Seconds(60)));
  const absl::Status healed = lab_->Heal(kCut);
  ASSERT_TRUE(healed.ok()) << healed;
  const absl::Time healed_at = absl::Now();
  ASSERT_NO_FATAL_FAILURE(AwaitCaughtUpUnderLoad());
  const std::vector<examples::PipelineReport> rounds = FinishWithoutDoubleCharges(load, watch);

  // Healed, leadership spreads again: each shard goes back to its first
  // voter, and each node leads within 10% of an even share.
  const absl::Time spread_by = healed_at + absl::Seconds(60);
  std::vector<int> leads;
  for (;;) {
    leads.assign(kRegions.size(), 0);
    for (const Leadership& l : cluster_->Leaders()) {
      if (l.node >= 0) ++leads[l.node];
    }
    const double even = static_cast<double>(kShards) / kRegions.size();
    const auto [least, busiest] = std::minmax_element(leads.begin(), leads.end());
    if (*busiest <= even * 1.1 && *least >= even * 0.9) break;
    ASSERT_LT(absl::Now(), spread_by)
        << "leadership did not spread again within 60 s of the heal: shards led per node "
        << absl::StrJoin(leads, ", ");
    absl::SleepFor(absl::Milliseconds(500));
  }
  std::cout << "healed, shards led per region: " << absl::StrJoin(leads, ", ") << "\n";

  if (const char* report = std::getenv("DEDUP_REGION_REPORT"); report != nullptr) {
    std::vector<std::string> json_rounds;
    for (const examples::PipelineReport& round : rounds) {
      json_rounds.push_back(
          absl::StrFormat(R"({"payments":%d,"charges":%d,"double_charged_keys":%d,"duplicates":%d,)"
                          R"("in_progress":%d,"errors":%d})",
                          round.payments, round.charges, round.double_charged_keys,
                          round.duplicates, round.in_progress, round.errors));
    }
    std::ofstream out(report, std::ios::app);
    out << absl::StrFormat(
        R"({"design":"stretched","delays":"%s","shards":%d,"callers":%d,"seconds":%d,"claims":%d,)"
        R"("failed":%d,"claims_per_second":%.1f,"p50_ms":%.2f,"p99_ms":%.2f,)"
        R"("by_leader_region":{%s},"region_c_cut_failover_s":%.2f,"rounds":[%s]})"
        "\n",
        EnvInt("DEDUP_REGION_NO_DELAY", 0) == 1 ? "none" : "regions", kShards, callers,
        static_cast<int>(absl::ToInt64Seconds(duration)), latencies.all.size(), latencies.failed,
        per_second, QuantileMs(latencies.all, 0.5), QuantileMs(latencies.all, 0.99),
        absl::StrJoin(json_by_region, ","), absl::ToDoubleSeconds(failover),
        absl::StrJoin(json_rounds, ","));
  }
}

}  // namespace
}  // namespace dedup::blackbox
