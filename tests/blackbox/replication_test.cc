// Replicated shards (docs/replication.md) through the dedupd binary: a
// local etcd and three nodes, every shard on all three, faults injected
// while the field experiment runs (client/examples/payment_pipeline.h:
// 2,000 payments, 8 workers, one payment in 20 delivered twice at once, the
// guard on every worker). What each test holds the cluster to:
//  - no acknowledged write is lost: every acknowledged Complete reads back
//    COMPLETED with its result;
//  - no duplicate gets through: every payment is charged exactly once;
//  - the history of every call keeps the promises of
//    tests/common/history_checker.h (tokens never go down, completions
//    stick, nothing is made up).
// The field experiment and those checks are in field_load.h.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/examples/payment_pipeline.h"
#include "dedup/client/client.h"
#include "gtest/gtest.h"
#include "server/cluster/etcd_client.h"
#include "storage/key_codec.h"
#include "tests/blackbox/field_load.h"
#include "tests/blackbox/leader_watch.h"
#include "tests/blackbox/pipeline_history.h"
#include "tests/blackbox/replicated_cluster.h"
#include "tests/common/http_scrape.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {
namespace {

class ReplicationTest : public FieldExperimentTest {
 protected:
  // Writes `text` as the nodes' config file in `dir` and returns the flag
  // that names it.
  static std::string ConfigFlag(const test::TempDir& dir, const std::string& text) {
    const std::string path = dir.Sub("dedupd.textproto");
    std::ofstream out(path);
    out << text;
    EXPECT_TRUE(out.good()) << path;
    return "--config=" + path;
  }

  // Kills the node leading the most shards and waits until every shard is
  // led again; returns the node.
  int KillBusiestLeader() {
    const std::vector<Leadership> leaders = cluster_->Leaders();
    const int victim = ReplicatedCluster::BusiestLeader(leaders);
    EXPECT_GE(victim, 0) << "no leader to kill: " << Describe(leaders);
    if (victim < 0) return victim;
    std::cout << "SIGKILL node " << victim << "; leaders were " << Describe(leaders) << "\n";
    cluster_->KillNode(victim);
    auto after = cluster_->WaitForAllShardsLed(kFailover);
    EXPECT_TRUE(after.ok()) << after.status();
    if (after.ok()) std::cout << "new leaders: " << Describe(*after) << "\n";
    return victim;
  }
};

// The leader of the most shards is SIGKILLed under load, twice: after the
// first failover the dead node comes back as a follower and catches up
// (three nodes must keep a majority after the second kill), then the new
// busiest leader dies too.
TEST_F(ReplicationTest, LeaderCrashUnderLoadLosesNoCompletionAndChargesEveryPaymentOnce) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  LeaderWatch watch(cluster_.get());
  FieldLoad load(client_.get(), Payments("crash"));
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(200));

  for (int crash = 1; crash <= 2; ++crash) {
    SCOPED_TRACE(absl::StrCat("crash ", crash));
    const int victim = KillBusiestLeader();
    ASSERT_GE(victim, 0);
    ASSERT_FALSE(HasFailure());
    ASSERT_NO_FATAL_FAILURE(AwaitProgress(100));
    const absl::Status back = cluster_->StartNode(victim);
    ASSERT_TRUE(back.ok()) << back;
    const absl::Status caught_up = cluster_->WaitForFullReplication(kCatchUp, kBehindUnderLoad);
    ASSERT_TRUE(caught_up.ok()) << caught_up;
  }
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(100));

  const std::vector<examples::PipelineReport> reports = load.Finish();
  PrintLeaderlessTimes(watch);
  ExpectEveryPaymentChargedOnce(reports);
  ExpectConsistentHistory();
  EXPECT_EQ(history_.Acknowledged().size(), 2000 * reports.size());
}

// SIGSTOP freezes the leader of the most shards with its sockets open for
// 30 s, at the shard count and lease a new cluster has (1,024 shards, 3 s):
// a hung node, unlike a dead one, refuses no connection, and every call to
// it waits out its deadline. The live nodes must lead every one of its
// shards again; then it wakes up believing it still leads, and must not
// answer as a leader any more: no payment is charged twice, every
// acknowledged completion reads back, and the history holds. (How long
// the shards wait is measured by bench/failover, not held to here.)
TEST_F(ReplicationTest, HungLeaderAtTheDefaultShardCountIsReplacedAndWakesFenced) {
  ReplicatedClusterOptions options;
  options.shards = 1024;
  options.leader_lease = absl::Seconds(3);
  // A new cluster's first nodes up lead shards whose first replica is not
  // up yet, and hand them back over the first seconds.
  ASSERT_NO_FATAL_FAILURE(StartCluster(options, 0, absl::Seconds(90)));
  LeaderWatch watch(cluster_.get());
  FieldLoad load(client_.get(), Payments("pause"));
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(200));

  const std::vector<Leadership> leaders = cluster_->Leaders();
  const int victim = ReplicatedCluster::BusiestLeader(leaders);
  ASSERT_GE(victim, 0) << Describe(leaders);
  std::cout << "SIGSTOP node " << victim << "; leaders were " << Describe(leaders) << "\n";
  const absl::Time paused_at = absl::Now();
  cluster_->PauseNode(victim);
  // A paused node answers nothing, so every shard led means new leaders.
  auto after = cluster_->WaitForAllShardsLed(kFailover);
  ASSERT_TRUE(after.ok()) << after.status();
  std::cout << "every shard led again " << absl::FormatDuration(absl::Now() - paused_at)
            << " after the pause: " << Describe(*after) << "\n";
  absl::SleepFor(std::max(absl::ZeroDuration(), paused_at + absl::Seconds(30) - absl::Now()));
  cluster_->ResumeNode(victim);
  std::cout << "SIGCONT node " << victim << " after "
            << absl::FormatDuration(absl::Now() - paused_at) << "\n";
  // Clients that still route to it meet it awake.
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(300));

  const std::vector<examples::PipelineReport> reports = load.Finish();
  PrintLeaderlessTimes(watch);
  // A call waiting on the hung node gives up on it after the client's
  // attempt timeout and is sent again by the newest map; one that finds
  // no new leader before its deadline fails, and its payment is not
  // charged (how long failover takes on a busy machine is not held to
  // here). None may be charged twice.
  ExpectNoPaymentChargedTwice(reports);
  ExpectConsistentHistory();
}

// etcd ends a paused leader's lease early, as etcd 3.4 did from a stalled
// old etcd leader: its leader keys go at once while it still counts on the
// lease (a 30 s lease, renewed every 7.5 s and trusted for 26.5 s after
// each renewal: at least 19 s after the pause; its successor waits out the
// read lease, 15 s after the last acknowledgement). Another
// replica takes the shard and completes a claim the paused leader holds
// in progress. Resumed, with a read of that key already waiting for it,
// the old leader must not answer from its stale records: its voters' read
// lease has run out (docs/replication.md §3). Against a build whose leaders
// trust etcd's lease alone (and whose replicas promise at once), the
// successor completed the claim 2.3 s after the pause and the old leader
// answered IN_PROGRESS in 2 runs of 3.
TEST_F(ReplicationTest, ALeaderWhoseEtcdLeaseEndsEarlyAnswersNoStaleRead) {
  ReplicatedClusterOptions options;
  options.shards = 1024;
  // Long enough that the old leader still trusts etcd's lease when it
  // wakes: its successor waits out half of it (the read lease).
  options.leader_lease = absl::Seconds(30);
  ASSERT_NO_FATAL_FAILURE(StartCluster(options, 0, absl::Seconds(90)));
  const std::string key = "stale-read";
  const uint32_t shard = storage::ShardOf(kPaymentNs, key, options.shards);
  const int old_leader = cluster_->Leaders()[shard].node;
  ASSERT_GE(old_leader, 0) << "shard " << shard << " has no leader";

  v1::ClaimRequest claim;
  claim.set_namespace_(kPaymentNs);
  claim.set_key(key);
  claim.set_owner("worker-1");
  claim.set_lease_ms(120000);
  absl::StatusOr<v1::ClaimResponse> claimed = client_->Claim(claim);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED) << claimed->ShortDebugString();

  server::cluster::EtcdOptions etcd_options;
  etcd_options.endpoints = {cluster_->etcd().endpoint()};
  auto etcd = server::cluster::EtcdClient::Connect(etcd_options);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string leader_key = absl::StrCat("/dedup/", options.cluster_name, "/leader/", shard);
  const absl::StatusOr<std::optional<server::cluster::EtcdKeyValue>> led = (*etcd)->Get(leader_key);
  ASSERT_TRUE(led.ok()) << led.status();
  ASSERT_TRUE(led->has_value() && (*led)->lease != 0) << leader_key << " is not on a lease";

  const absl::Time paused_at = absl::Now();
  cluster_->PauseNode(old_leader);
  ASSERT_TRUE((*etcd)->RevokeLease((*led)->lease).ok());
  int new_leader = -1;
  const absl::Time give_up = absl::Now() + absl::Seconds(40);
  while (absl::Now() < give_up) {
    new_leader = cluster_->Leaders()[shard].node;
    if (new_leader >= 0 && new_leader != old_leader) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(new_leader >= 0 && new_leader != old_leader)
      << "shard " << shard << " was not led again while node " << old_leader << " was paused";
  v1::CompleteRequest complete;
  complete.set_namespace_(kPaymentNs);
  complete.set_key(key);
  complete.set_token(claimed->token());
  complete.set_result("charged");
  // Straight to the new leader, which may take a moment to serve.
  v1::CompleteResponse completed;
  grpc::Status complete_status;
  for (const absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    complete_status = cluster_->stub(new_leader).Complete(&context, complete, &completed);
    if (complete_status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(complete_status.ok()) << complete_status.error_message();
  ASSERT_EQ(completed.outcome(), v1::CompleteResponse::OK) << completed.ShortDebugString();
  std::cout << "node " << new_leader << " leads shard " << shard << " and completed the claim "
            << absl::FormatDuration(absl::Now() - paused_at) << " after node " << old_leader
            << " was paused\n";

  // The read waits in the old leader's socket when it wakes.
  v1::QueryRequest query;
  query.set_namespace_(kPaymentNs);
  query.set_key(key);
  v1::QueryResponse answer;
  grpc::Status status;
  std::thread read([&] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    status = cluster_->stub(old_leader).Query(&context, query, &answer);
  });
  absl::SleepFor(absl::Milliseconds(300));
  cluster_->ResumeNode(old_leader);
  read.join();
  std::cout << "node " << old_leader << ", resumed, answered: "
            << (status.ok() ? answer.ShortDebugString() : status.error_message()) << "\n";
  if (status.ok()) {
    EXPECT_EQ(answer.record().state(), v1::STATE_COMPLETED)
        << "a stale read: " << answer.ShortDebugString();
  } else {
    EXPECT_TRUE(status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                status.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_code() << ": " << status.error_message();
  }
  auto settled = cluster_->WaitForAllShardsLed(kFailover);
  EXPECT_TRUE(settled.ok()) << settled.status();
}

// A follower loses its volume: stopped, its data directory deleted, started
// again empty. It must re-seed from the leader before it counts as a
// replica; once all three are live and caught up, the leader is killed and
// the re-seeded node is half of what is left: nothing acknowledged may be
// missing, and writes go on through it.
TEST_F(ReplicationTest, FollowerWithALostVolumeReseedsAndTheLeaderCanThenDie) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  examples::PipelineReport before = examples::RunPaymentPipeline(client_.get(), Payments("before"));
  ExpectEveryPaymentChargedOnce({before});

  const std::vector<Leadership> leaders = cluster_->Leaders();
  ASSERT_GE(leaders[0].node, 0) << Describe(leaders);
  const int follower = (leaders[0].node + 1) % cluster_->size();
  std::cout << "stopping node " << follower << ", a follower of shard 0; leaders were "
            << Describe(leaders) << "\n";
  auto stopped = cluster_->StopNode(follower);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << cluster_->Output(follower);
  ASSERT_TRUE(cluster_->WaitForAllShardsLed(kFailover).ok());
  // Writes the lost volume never saw.
  examples::PipelineReport while_down =
      examples::RunPaymentPipeline(client_.get(), Payments("while-down", 500));
  ExpectEveryPaymentChargedOnce({while_down});

  ASSERT_TRUE(cluster_->WipeNode(follower).ok());
  const absl::Status back = cluster_->StartNode(follower);
  ASSERT_TRUE(back.ok()) << back;
  const absl::Status reseeded = cluster_->WaitForFullReplication(kCatchUp, /*max_behind=*/0);
  ASSERT_TRUE(reseeded.ok()) << "the wiped node did not come back as a full replica: " << reseeded;

  // Any node but the wiped one: the leader of shard 0, unless that is it.
  const std::vector<Leadership> now = cluster_->Leaders();
  const int victim =
      now[0].node >= 0 && now[0].node != follower ? now[0].node : (follower + 1) % cluster_->size();
  std::cout << "SIGKILL node " << victim << "; leaders were " << Describe(now) << "\n";
  cluster_->KillNode(victim);
  auto after = cluster_->WaitForAllShardsLed(kFailover);
  ASSERT_TRUE(after.ok()) << after.status();
  std::cout << "new leaders: " << Describe(*after) << "\n";

  // With one node dead, every write needs the re-seeded node's log.
  examples::PipelineReport after_kill =
      examples::RunPaymentPipeline(client_.get(), Payments("after-kill", 500));
  ExpectEveryPaymentChargedOnce({after_kill});
  ExpectConsistentHistory();
  EXPECT_EQ(history_.Acknowledged().size(), 3000u);
}

// Every node configured with the smallest message limit it accepts
// (limits.max_receive_message_bytes 64 KiB). A follower stopped while the
// others take 1,000 payments comes back behind by several times that, in
// every shard: its leaders must send the backlog in calls that fit the
// limit, or it never catches up. Once it has, another node is killed, so
// that every acknowledged completion is read through a majority that
// includes it.
TEST_F(ReplicationTest, FollowerFarBehindCatchesUpUnderTheSmallestMessageLimit) {
  test::TempDir config_dir;
  ReplicatedClusterOptions options;
  options.extra_flags = {ConfigFlag(config_dir, "limits { max_receive_message_bytes: 65536 }\n")};
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));

  const std::vector<Leadership> leaders = cluster_->Leaders();
  ASSERT_GE(leaders[0].node, 0) << Describe(leaders);
  const int follower = (leaders[0].node + 1) % cluster_->size();
  std::cout << "stopping node " << follower << "; leaders were " << Describe(leaders) << "\n";
  auto stopped = cluster_->StopNode(follower);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  ASSERT_TRUE(cluster_->WaitForAllShardsLed(kFailover).ok());
  examples::PipelineReport while_down =
      examples::RunPaymentPipeline(client_.get(), Payments("while-down", 1000));
  ExpectEveryPaymentChargedOnce({while_down});

  const absl::Status back = cluster_->StartNode(follower);
  ASSERT_TRUE(back.ok()) << back;
  const absl::Status caught_up = cluster_->WaitForFullReplication(kCatchUp, /*max_behind=*/0);
  ASSERT_TRUE(caught_up.ok()) << "the node that was down did not catch up: " << caught_up << "\n"
                              << cluster_->Output(follower);

  const std::vector<Leadership> now = cluster_->Leaders();
  const int victim =
      now[0].node >= 0 && now[0].node != follower ? now[0].node : (follower + 1) % cluster_->size();
  std::cout << "SIGKILL node " << victim << "; leaders were " << Describe(now) << "\n";
  cluster_->KillNode(victim);
  auto after = cluster_->WaitForAllShardsLed(kFailover);
  ASSERT_TRUE(after.ok()) << after.status();
  ExpectConsistentHistory();
  EXPECT_EQ(history_.Acknowledged().size(), 1000u);
}

// Followers apply committed entries to their records in batches (64 at a
// time under load), and the rest by the next heartbeat once the writes
// stop: every replica of every shard then reports its whole log applied.
// A follower's records are what it serves from if it is elected, so none
// may be left behind for good.
TEST_F(ReplicationTest, FollowersApplyEveryCommittedEntryOnceTheWritesStop) {
  // Buffered: followers take Ship on the thread that reads it
  // (replication_service.h); the other tests run fsync, where a pool does.
  ReplicatedClusterOptions options;
  options.durability = "buffered";
  // /metrics of every node, for what the leaders say they shipped.
  const std::vector<int> metrics_ports = FreePorts(3);
  for (int node = 0; node < 3; ++node) {
    options.node_flags[node] = {absl::StrCat("--metrics_listen=127.0.0.1:", metrics_ports[node])};
  }
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  const std::vector<Leadership> leaders_before = cluster_->Leaders();
  examples::PipelineReport report =
      examples::RunPaymentPipeline(client_.get(), Payments("apply", 300));
  ExpectEveryPaymentChargedOnce({report});

  uint64_t entries_in_logs = 0;  // Over the shards, as their leaders hold them.
  const std::string behind = AwaitAllApplied(*cluster_, absl::Seconds(10), &entries_in_logs);
  EXPECT_EQ(behind, "") << "a replica has not applied its whole log 10 s after the writes";

  // The leaders count what they ship: every entry of the logs went to
  // both followers of its shard in its leader's replication calls, so in
  // all at least twice the entries. That holds while no shard changed
  // leader after the first elections (a new leader may have pulled
  // entries instead); otherwise each entry went out at least once, to
  // reach a majority.
  const bool same_leaders = cluster_->Leaders() == leaders_before;
  double ship_calls = 0;
  double shipped_entries = 0;
  for (int node = 0; node < 3; ++node) {
    const test::HttpReply reply = test::HttpGet(metrics_ports[node], "/metrics");
    ASSERT_EQ(reply.code, 200) << "node " << node << " /metrics";
    for (const auto& [series, value] : test::ParseMetrics(reply.body)) {
      if (absl::StartsWith(series, "dedup_replication_ship_calls_total{")) ship_calls += value;
      if (absl::StartsWith(series, "dedup_replication_shipped_entries_total{")) {
        shipped_entries += value;
      }
    }
  }
  std::cout << "entries in the shards' logs: " << entries_in_logs << "; replication calls "
            << ship_calls << " carrying " << shipped_entries << " entries"
            << (same_leaders ? "" : " (a shard changed leader during the run)") << "\n";
  EXPECT_GT(entries_in_logs, 0u);
  EXPECT_GT(ship_calls, 0);
  EXPECT_GE(shipped_entries, (same_leaders ? 2.0 : 1.0) * static_cast<double>(entries_in_logs));
}

// A replicated node decides and appends a unary call or a Batch on the
// gRPC thread that read it, and answers it from the thread that sees its
// commit, as it does a Stream's batches: no worker waits for followers.
// With one worker and a queue of four on every node, at the default shard
// count, 32 callers sending Claim and a Batch with the Complete straight
// to their keys' leaders (about 11 at once per node) must almost never
// find a node busy. A node that gave each write a worker for its round
// trip to the followers could hold five at once, and refuses the rest
// RESOURCE_EXHAUSTED. Only calls that find another call holding one of
// their keys' stripes go to the worker, and those are rare.
TEST_F(ReplicationTest, UnaryCallsAndBatchesWaitForTheirCommitWithoutAWorker) {
  test::TempDir config_dir;
  ReplicatedClusterOptions options;
  options.shards = 1024;
  options.extra_flags = {ConfigFlag(config_dir, "workers: 1\nlimits { max_queued_tasks: 4 }\n")};
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  const absl::Status replicated = cluster_->WaitForFullReplication(kCatchUp);
  ASSERT_TRUE(replicated.ok()) << replicated;

  const std::vector<Leadership> leaders = cluster_->Leaders();
  constexpr int kCallers = 32;
  constexpr int kClaimsEach = 20;
  // A server whose writes each held a worker refused about 1,250 of the
  // 1,280 calls at least once; one that holds none, none in most runs.
  // The few allowed are for calls that met another's stripe.
  constexpr int kRefusalsAllowed = kCallers;
  const absl::Time began = absl::Now();
  std::atomic<int> refused{0};
  std::vector<std::string> failures(kCallers);
  std::vector<int> completed(kCallers, 0);
  std::vector<std::thread> callers;
  for (int caller = 0; caller < kCallers; ++caller) {
    callers.emplace_back([&, caller] {
      // To the leader of `key`'s shard; a call that finds leadership moved
      // asks the cluster again (no fault is injected, so that is rare). A
      // call refused RESOURCE_EXHAUSTED is counted and sent again.
      auto call_leader = [&](const std::string& key, auto&& call) {
        const uint32_t shard = storage::ShardOf(kPaymentNs, key, options.shards);
        grpc::Status status;
        bool ask = false;
        for (int attempt = 0; attempt < 100; ++attempt) {
          const int leader = ask ? cluster_->Leaders()[shard].node : leaders[shard].node;
          if (leader >= 0) {
            grpc::ClientContext context;
            context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
            status = call(cluster_->stub(leader), &context);
            if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
              if (refused.fetch_add(1) < 3) {
                std::cout << "refused " << absl::FormatDuration(absl::Now() - began)
                          << " into the load, by node " << leader << ": " << status.error_message()
                          << "\n";
              }
              absl::SleepFor(absl::Milliseconds(20));
              continue;
            }
            if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
                status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) {
              return status;
            }
          }
          ask = true;
          absl::SleepFor(absl::Milliseconds(100));
        }
        return status;
      };
      for (int i = 0; i < kClaimsEach && failures[caller].empty(); ++i) {
        const std::string key = absl::StrCat("no-worker-", caller, "-", i);
        v1::ClaimRequest claim;
        claim.set_namespace_(kPaymentNs);
        claim.set_key(key);
        claim.set_owner(absl::StrCat("caller-", caller));
        claim.set_lease_ms(60000);
        v1::ClaimResponse claimed;
        grpc::Status status = call_leader(key, [&](v1::Dedup::Stub& stub, grpc::ClientContext* c) {
          return stub.Claim(c, claim, &claimed);
        });
        if (!status.ok() || claimed.outcome() != v1::ClaimResponse::ACQUIRED) {
          failures[caller] = absl::StrCat("Claim ", key, ": ", status.error_code(), " ",
                                          status.error_message(), " ", claimed.ShortDebugString());
          break;
        }
        v1::BatchRequest batch;
        v1::CompleteRequest* complete = batch.add_operations()->mutable_complete();
        complete->set_namespace_(kPaymentNs);
        complete->set_key(key);
        complete->set_token(claimed.token());
        complete->set_result("done");
        v1::BatchResponse answered;
        status = call_leader(key, [&](v1::Dedup::Stub& stub, grpc::ClientContext* c) {
          grpc::Status batched = stub.Batch(c, batch, &answered);
          // An item refused by a node that does not lead its shard (now).
          if (batched.ok() && answered.results_size() == 1 && answered.results(0).has_error()) {
            const v1::Error& error = answered.results(0).error();
            return grpc::Status(static_cast<grpc::StatusCode>(error.code()), error.message());
          }
          return batched;
        });
        if (!status.ok() || answered.results_size() != 1 ||
            answered.results(0).complete().outcome() != v1::CompleteResponse::OK) {
          failures[caller] =
              absl::StrCat("Batch with the Complete of ", key, ": ", status.error_code(), " ",
                           status.error_message(), " ", answered.ShortDebugString());
          break;
        }
        ++completed[caller];
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  int done = 0;
  for (int caller = 0; caller < kCallers; ++caller) {
    EXPECT_EQ(failures[caller], "") << "caller " << caller;
    done += completed[caller];
  }
  EXPECT_EQ(done, kCallers * kClaimsEach);
  std::cout << refused.load() << " of " << 2 * kCallers * kClaimsEach
            << " calls were refused RESOURCE_EXHAUSTED first\n";
  EXPECT_LE(refused.load(), kRefusalsAllowed);
}

// Every node in turn gets SIGTERM while the field experiment runs, as a
// rolling upgrade does: a leader hands its shards to an up-to-date follower
// before it exits, so not one call fails beyond the client's own retries.
// It also tells each target directly, which then stands at once instead
// of on its next read of etcd (dedup_replication_handoff_notices_total),
// and every hand-off is written to etcd: one that is not (its leader key
// deleted meanwhile, by the answer to a write the step-down left
// uncommitted or as a stale key) leaves the shard to an ordinary election
// once the old leader's read lease has ended, over a second later.
TEST_F(ReplicationTest, RollingRestartUnderLoadFailsNoCall) {
  ReplicatedClusterOptions options;
  const std::vector<int> metrics_ports = FreePorts(3);
  for (int node = 0; node < 3; ++node) {
    options.node_flags[node] = {absl::StrCat("--metrics_listen=127.0.0.1:", metrics_ports[node])};
  }
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  FieldLoad load(client_.get(), Payments("roll"));
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(200));

  const client::Clock& clock = *client::SystemClock::Default();
  const client::SteadyTime roll_start = clock.SteadyNow();
  for (int node = 0; node < cluster_->size(); ++node) {
    SCOPED_TRACE(absl::StrCat("node ", node));
    std::cout << "SIGTERM node " << node << "; leaders were " << Describe(cluster_->Leaders())
              << "\n";
    const absl::StatusOr<ExitStatus> stopped = cluster_->StopNode(node);
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    ASSERT_EQ(*stopped, ExitStatus::Exited(0)) << cluster_->Output(node);
    // A hand-off whose transaction found the leader key changed or gone
    // (an etcd error, also logged, would be the machine's, not a race's).
    for (absl::string_view line : absl::StrSplit(cluster_->Output(node), '\n')) {
      EXPECT_FALSE(absl::StrContains(line, "a hand-off was not written to etcd") &&
                   absl::StrContains(line, "the leader key"))
          << line;
    }
    const absl::Status started = cluster_->StartNode(node);
    ASSERT_TRUE(started.ok()) << started;
    const absl::Status caught_up = cluster_->WaitForFullReplication(kCatchUp, kBehindUnderLoad);
    ASSERT_TRUE(caught_up.ok()) << caught_up;
  }
  const client::SteadyTime roll_end = clock.SteadyNow();
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(100));

  const std::vector<examples::PipelineReport> reports = load.Finish();
  ExpectEveryPaymentChargedOnce(reports);
  ExpectConsistentHistory();
  std::vector<absl::Duration> latencies = history_.Latencies(roll_start, roll_end);
  const absl::Duration p50 = Percentile(latencies, 0.5);
  const absl::Duration p99 = Percentile(latencies, 0.99);
  const absl::Duration slowest = Percentile(latencies, 1.0);
  std::cout << "during the roll (" << absl::FormatDuration(roll_end - roll_start)
            << "): " << latencies.size() << " calls, p50 " << absl::FormatDuration(p50) << ", p99 "
            << absl::FormatDuration(p99) << ", max " << absl::FormatDuration(slowest) << "\n";
  RecordProperty("roll_calls", static_cast<int>(latencies.size()));
  RecordProperty("roll_p99_us", static_cast<int>(absl::ToInt64Microseconds(p99)));

  // Counters start again with each run of a node: what the nodes restarted
  // first were told by those stopped after them.
  double stood = 0;
  for (int node = 0; node < 3; ++node) {
    const test::HttpReply reply = test::HttpGet(metrics_ports[node], "/metrics");
    ASSERT_EQ(reply.code, 200) << "node " << node << " /metrics";
    for (const auto& [series, value] : test::ParseMetrics(reply.body)) {
      if (series == "dedup_replication_handoff_notices_total{direction=\"stood\"}") stood += value;
    }
  }
  std::cout << "shards taken over at once on a hand-off notice since the nodes' last starts: "
            << stood << "\n";
  EXPECT_GT(stood, 0);
}

// How each node answers a Query of `key` now.
std::vector<grpc::StatusCode> QueryEveryNode(const ReplicatedCluster& cluster,
                                             const std::string& key) {
  std::vector<grpc::StatusCode> codes;
  for (int node = 0; node < cluster.size(); ++node) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    v1::QueryRequest query;
    query.set_namespace_(kPaymentNs);
    query.set_key(key);
    v1::QueryResponse answer;
    codes.push_back(cluster.stub(node).Query(&context, query, &answer).error_code());
  }
  return codes;
}

// etcd goes away. Leaders hold their shards until their leases end (a
// longer lease here, 6 s, so that "still serving" can be seen), then every
// shard fails closed: no node answers for it, the leaders say UNAVAILABLE.
// When etcd returns, leaders are elected again and nothing acknowledged
// before the outage is missing.
TEST_F(ReplicationTest, EtcdOutageFailsClosedAfterTheLeasesAndRecoversWithNothingLost) {
  ReplicatedClusterOptions options;
  options.leader_lease = absl::Seconds(6);
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  examples::PipelineReport before =
      examples::RunPaymentPipeline(client_.get(), Payments("before-outage"));
  ExpectEveryPaymentChargedOnce({before});
  const std::vector<std::string> probes = ProbeKeys(cluster_->shards());
  for (const std::string& key : probes) {
    v1::ClaimRequest claim;
    claim.set_namespace_(kPaymentNs);
    claim.set_key(key);
    claim.set_owner("prober");
    auto claimed = client_->Claim(claim);
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    v1::CompleteRequest complete;
    complete.set_namespace_(kPaymentNs);
    complete.set_key(key);
    complete.set_token(claimed->token());
    complete.set_result("probe");
    ASSERT_TRUE(client_->Complete(complete).ok());
  }

  cluster_->etcd().Stop();
  const absl::Time etcd_gone = absl::Now();

  // Each shard answers (from its leader) until its lease ends, then no
  // more: the leader answers UNAVAILABLE and no node answers OK, until etcd
  // is back.
  std::vector<absl::Duration> served_for(probes.size(), absl::ZeroDuration());
  std::vector<bool> closed(probes.size(), false);
  std::optional<absl::Time> all_closed;
  const absl::Time give_up = etcd_gone + options.leader_lease + absl::Seconds(5);
  while (absl::Now() < (all_closed.has_value() ? *all_closed + absl::Seconds(1) : give_up)) {
    for (size_t shard = 0; shard < probes.size(); ++shard) {
      const std::vector<grpc::StatusCode> codes = QueryEveryNode(*cluster_, probes[shard]);
      const bool answered = std::count(codes.begin(), codes.end(), grpc::StatusCode::OK) > 0;
      const bool unavailable =
          std::count(codes.begin(), codes.end(), grpc::StatusCode::UNAVAILABLE) > 0;
      if (answered) {
        EXPECT_FALSE(closed[shard]) << "shard " << shard << " answered again after failing closed";
        served_for[shard] = absl::Now() - etcd_gone;
      } else if (unavailable) {
        closed[shard] = true;
      }
    }
    if (!all_closed.has_value() && std::count(closed.begin(), closed.end(), false) == 0) {
      all_closed = absl::Now();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  for (size_t shard = 0; shard < probes.size(); ++shard) {
    std::cout << "shard " << shard << " served for " << absl::FormatDuration(served_for[shard])
              << " without etcd\n";
    EXPECT_GT(served_for[shard], absl::ZeroDuration())
        << "shard " << shard << " stopped serving at once, before its leader's lease ended";
    EXPECT_LE(served_for[shard], options.leader_lease)
        << "shard " << shard << " was served past its leader's lease";
    EXPECT_TRUE(closed[shard]) << "shard " << shard << " did not fail closed with UNAVAILABLE\n"
                               << cluster_->OutputTails();
  }
  // Closed means closed, through the client too.
  v1::ClaimRequest refused;
  refused.set_namespace_(kPaymentNs);
  refused.set_key("while-etcd-is-down");
  refused.set_owner("prober");
  client::CallOptions short_call;
  short_call.deadline = absl::Now() + absl::Seconds(1);
  EXPECT_FALSE(client_->Claim(refused, short_call).ok());

  const absl::Status restarted = cluster_->etcd().Restart();
  ASSERT_TRUE(restarted.ok()) << restarted;
  auto leaders = cluster_->WaitForAllShardsLed(kFirstElection);
  ASSERT_TRUE(leaders.ok()) << leaders.status();
  std::cout << "leaders after etcd returned: " << Describe(*leaders) << "\n";

  examples::PipelineReport after =
      examples::RunPaymentPipeline(client_.get(), Payments("after-outage"));
  ExpectEveryPaymentChargedOnce({after});
  for (const std::string& key : probes) {
    v1::QueryRequest query;
    query.set_namespace_(kPaymentNs);
    query.set_key(key);
    auto read = client_->Query(query);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->record().state(), v1::STATE_COMPLETED) << key;
    EXPECT_EQ(read->record().result(), "probe") << key;
  }
  ExpectConsistentHistory();
}

}  // namespace
}  // namespace dedup::blackbox
