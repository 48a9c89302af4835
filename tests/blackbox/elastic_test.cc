// Elastic clusters (docs/elastic.md, as far as it is built: a cluster keeps
// its shard count and moves whole shards between nodes) through the dedupd
// and dedupctl binaries: nodes added and removed with `dedupctl cluster`
// while the field experiment runs, a move's source or target SIGKILLed in
// the middle of it, and keys completed before moves answered the same after
// them. Besides what field_load.h holds every test to (every payment
// charged once, no call failed, the history checked, every acknowledged
// completion read back), the placement each test ends with must be
// settled (no move or learner left, three live voters per shard, each
// shard led by one of them) and, after add-node, remove-node and rebalance,
// balanced: every node that keeps shards votes for within one of the mean.
// A node with another shard count than the cluster's is refused.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/examples/payment_pipeline.h"
#include "dedup/client/client.h"
#include "dedup/client/clock.h"
#include "gtest/gtest.h"
#include "server/cluster/etcd_client.h"
#include "storage/key_codec.h"
#include "tests/blackbox/dedupctl_process.h"
#include "tests/blackbox/field_load.h"
#include "tests/blackbox/leader_watch.h"
#include "tests/blackbox/pipeline_history.h"
#include "tests/blackbox/placement.h"
#include "tests/blackbox/replicated_cluster.h"

namespace dedup::blackbox {
namespace {

constexpr uint32_t kShards = 16;
// More shards than a data directory's 16 column families: shards share them.
constexpr uint32_t kSharedFamilyShards = 32;
constexpr uint32_t kReplicationFactor = 3;
// What one `dedupctl cluster` command may take (its --wait) and how long
// the test waits for it to end; both well inside the test's own timeout.
constexpr char kDedupctlWait[] = "--wait=60s";
constexpr absl::Duration kDedupctlTimeout = absl::Seconds(75);
// For every node to see the placement a finished command left.
constexpr absl::Duration kSettle = absl::Seconds(30);
// A move's source or target crashed: an election, the node's return, and
// the move resumed or rolled back.
constexpr absl::Duration kSettleAfterCrash = absl::Seconds(90);
// The move that a test crashes a node in: the moved shard's records
// (kPreloadedKeys with results of ~200 bytes, about 0.8 MiB to copy) sent
// at kMoveBytesPerSecond take some 8 s.
constexpr uint32_t kMovedShard = 5;
constexpr int kPreloadedKeys = 2500;
constexpr int kMoveBytesPerSecond = 100'000;
// Claims and completions the preload and read-back have in the air.
constexpr int kLoaders = 16;
constexpr char kLoader[] = "loader";
constexpr uint64_t kHeldLeaseMs = 5 * 60'000;  // Outlasts the test.

// A key stored before the cluster changed, as acknowledged.
struct StoredKey {
  std::string key;
  uint64_t token = 0;
  // The acknowledged result; empty: claimed by kLoader and left IN_PROGRESS.
  std::string result;
};

// The result stored for `key`: about 200 bytes, so that a shard's records
// weigh something to move.
std::string ResultFor(const std::string& key) {
  return absl::StrCat(key, ":", std::string(200, 'r'));
}

// `count` keys "<prefix>0", "<prefix>1", ... of kPaymentNs, only those of
// `shard` unless it is nullopt.
std::vector<std::string> Keys(const std::string& prefix, int count,
                              std::optional<uint32_t> shard = std::nullopt) {
  std::vector<std::string> keys;
  for (int i = 0; static_cast<int>(keys.size()) < count; ++i) {
    std::string key = absl::StrCat(prefix, i);
    if (!shard.has_value() || storage::ShardOf(kPaymentNs, key, kShards) == *shard) {
      keys.push_back(std::move(key));
    }
  }
  return keys;
}

// Runs `work(i)` for every i in [0, n) on kLoaders threads.
void ForEachInParallel(size_t n, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kLoaders; ++t) {
    threads.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) work(i);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Claims every key as kLoader and, when `complete`, completes it with
// ResultFor(key); otherwise leaves it IN_PROGRESS for kHeldLeaseMs. One
// line in `problems` for each key that was not stored so.
std::vector<StoredKey> Store(client::Client& client, const std::vector<std::string>& keys,
                             bool complete, std::vector<std::string>* problems) {
  std::vector<StoredKey> stored(keys.size());
  absl::Mutex mu;
  ForEachInParallel(keys.size(), [&](size_t i) {
    StoredKey& out = stored[i];
    out.key = keys[i];
    v1::ClaimRequest claim;
    claim.set_namespace_(kPaymentNs);
    claim.set_key(out.key);
    claim.set_owner(kLoader);
    claim.set_lease_ms(kHeldLeaseMs);
    std::string problem;
    absl::StatusOr<v1::ClaimResponse> claimed = client.Claim(claim);
    if (!claimed.ok() || claimed->outcome() != v1::ClaimResponse::ACQUIRED) {
      problem =
          absl::StrCat(out.key, ": Claim answered ",
                       claimed.ok() ? claimed->ShortDebugString() : claimed.status().ToString());
    } else {
      out.token = claimed->token();
      if (complete) {
        v1::CompleteRequest request;
        request.set_namespace_(kPaymentNs);
        request.set_key(out.key);
        request.set_token(out.token);
        request.set_result(ResultFor(out.key));
        absl::StatusOr<v1::CompleteResponse> completed = client.Complete(request);
        if (!completed.ok() || completed->outcome() != v1::CompleteResponse::OK) {
          problem = absl::StrCat(
              out.key, ": Complete answered ",
              completed.ok() ? completed->ShortDebugString() : completed.status().ToString());
        } else {
          out.result = request.result();
        }
      }
    }
    if (!problem.empty()) {
      absl::MutexLock lock(&mu);
      problems->push_back(std::move(problem));
    }
  });
  return stored;
}

// Whether a claim by another owner answers as `stored` was left:
// COMPLETED with its token and result, or IN_PROGRESS held by kLoader.
bool AnswersAsStored(const v1::ClaimResponse& answer, const StoredKey& stored) {
  if (stored.result.empty()) {
    return answer.outcome() == v1::ClaimResponse::IN_PROGRESS && answer.holder() == kLoader;
  }
  return answer.outcome() == v1::ClaimResponse::COMPLETED && answer.token() == stored.token &&
         answer.result() == stored.result;
}

// Claims every stored key again as another owner: one line for each key
// not answered as it was stored.
std::vector<std::string> ClaimAgain(client::Client& client, const std::vector<StoredKey>& keys) {
  absl::Mutex mu;
  std::vector<std::string> problems;
  ForEachInParallel(keys.size(), [&](size_t i) {
    const StoredKey& stored = keys[i];
    v1::ClaimRequest claim;
    claim.set_namespace_(kPaymentNs);
    claim.set_key(stored.key);
    claim.set_owner("reader");
    absl::StatusOr<v1::ClaimResponse> answer = client.Claim(claim);
    std::string problem;
    if (!answer.ok()) {
      problem = absl::StrCat(stored.key, ": Claim failed: ", answer.status().ToString());
    } else if (!AnswersAsStored(*answer, stored)) {
      problem = absl::StrCat(stored.key, ": stored with token ", stored.token,
                             stored.result.empty() ? " and left in progress" : " and completed",
                             ", but a claim now answers ", answer->ShortDebugString());
    }
    if (!problem.empty()) {
      absl::MutexLock lock(&mu);
      problems.push_back(std::move(problem));
    }
  });
  return problems;
}

std::vector<int> Range(int from, int to) {
  std::vector<int> nodes;
  for (int node = from; node < to; ++node) nodes.push_back(node);
  return nodes;
}

class ElasticTest : public FieldExperimentTest {
 protected:
  // `nodes` addresses, the first `initial_nodes` started (0: all),
  // `shards` shards on 3 replicas. Buffered durability: a SIGKILL leaves
  // the page cache, so it loses nothing a process crash could take, and
  // five nodes sharing one disk would otherwise spend every call on
  // flushes.
  static ReplicatedClusterOptions Options(int nodes, int initial_nodes, uint32_t shards = kShards) {
    ReplicatedClusterOptions options;
    options.nodes = nodes;
    options.initial_nodes = initial_nodes;
    options.shards = shards;
    options.replication_factor = kReplicationFactor;
    options.durability = "buffered";
    options.cluster_name = "elastic-test";
    return options;
  }

  // `dedupctl --endpoint=<the first three nodes> cluster <args...>`, run to
  // its end; its output is printed.
  DedupctlRun Dedupctl(const std::vector<std::string>& args) {
    std::unique_ptr<DedupctlProcess> process = SpawnDedupctl(args);
    if (process == nullptr) return DedupctlRun{};
    std::optional<DedupctlRun> run = process->Wait(kDedupctlTimeout);
    if (!run.has_value()) {
      ADD_FAILURE() << process->command() << " still ran after "
                    << absl::FormatDuration(kDedupctlTimeout) << "; its output so far:\n"
                    << process->Out() << "\n"
                    << cluster_->OutputTails();
      DedupctlRun killed;
      killed.command = process->command();
      killed.status = ExitStatus::Signaled(SIGKILL);
      return killed;
    }
    std::cout << Describe(*run) << "\n";
    return *run;
  }

  // The same, left running in the background.
  std::unique_ptr<DedupctlProcess> SpawnDedupctl(const std::vector<std::string>& args) {
    std::vector<std::string> full = {"--endpoint=" + cluster_->Endpoints(3), "cluster"};
    full.insert(full.end(), args.begin(), args.end());
    full.push_back(kDedupctlWait);
    auto process = DedupctlProcess::Spawn(full, dir_.Sub(absl::StrCat("dedupctl-", ++runs_)));
    EXPECT_TRUE(process.ok()) << process.status();
    return process.ok() ? std::move(*process) : nullptr;
  }

  // Waits for the placement to settle and expects it balanced over `nodes`.
  // Returns the placement (empty when it did not settle).
  v1::TopologyResponse ExpectSettledAndBalanced(const std::vector<int>& nodes,
                                                absl::Duration timeout = kSettle) {
    absl::StatusOr<v1::TopologyResponse> placement = cluster_->WaitForSettledPlacement(timeout);
    EXPECT_TRUE(placement.ok()) << placement.status();
    if (!placement.ok()) return v1::TopologyResponse();
    std::cout << "placement: " << DescribePlacement(*placement) << "\n"
              << "voters per node: " << absl::StrJoin(VotersPerNode(*placement), ",") << "\n";
    const std::vector<std::string> imbalance = Imbalance(*placement, nodes);
    EXPECT_TRUE(imbalance.empty())
        << "not balanced over nodes " << absl::StrJoin(nodes, ",") << ":\n"
        << FirstLines(imbalance) << "\n"
        << DescribePlacement(*placement);
    return *placement;
  }

  // p50, p99 and max of the calls sent in [from, to), printed and recorded
  // as test properties named after `what`.
  void PrintLatencies(const std::string& what, client::SteadyTime from, client::SteadyTime to) {
    const std::vector<absl::Duration> latencies = history_.Latencies(from, to);
    const absl::Duration p99 = Percentile(latencies, 0.99);
    std::cout << what << " (" << absl::FormatDuration(to - from) << "): " << latencies.size()
              << " calls, p50 " << absl::FormatDuration(Percentile(latencies, 0.5)) << ", p99 "
              << absl::FormatDuration(p99) << ", max "
              << absl::FormatDuration(Percentile(latencies, 1.0)) << "\n";
    RecordProperty(what + "_calls", static_cast<int>(latencies.size()));
    RecordProperty(what + "_p99_us", static_cast<int>(absl::ToInt64Microseconds(p99)));
  }

  client::SteadyTime Now() const { return client_->clock().SteadyNow(); }

  const std::string& Address(int node) const { return cluster_->addresses()[node]; }

 private:
  int runs_ = 0;
};

// Three nodes grow to five under the field experiment: each new node is
// started and `dedupctl cluster add-node` waits for it and moves shards
// onto it until every node votes for within one of the mean. The client
// was only ever told the first three nodes: it finds the others through
// Topology and follows every move without a failed call.
TEST_F(ElasticTest, ScaleOutUnderLoadFailsNoCallAndBalancesTheVoters) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options(5, 3), /*client_nodes=*/3));
  const absl::Status replicated = cluster_->WaitForFullReplication(kCatchUp);
  ASSERT_TRUE(replicated.ok()) << replicated;
  LeaderWatch watch(cluster_.get());
  const client::SteadyTime load_start = Now();
  FieldLoad load(client_.get(), Payments("scale-out"));
  // Long enough to measure the calls before the change.
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(1500));

  const client::SteadyTime change_start = Now();
  for (int node : {3, 4}) {
    SCOPED_TRACE(absl::StrCat("adding node ", node));
    const absl::Status started = cluster_->StartNode(node);
    ASSERT_TRUE(started.ok()) << started;
    const DedupctlRun run = Dedupctl({"add-node", Address(node)});
    ASSERT_EQ(run.status, ExitStatus::Exited(0)) << Describe(run) << "\n"
                                                 << cluster_->OutputTails();
    EXPECT_FALSE(run.out.empty()) << "add-node printed no progress";
    std::cout << "add-node " << node << " took " << absl::FormatDuration(run.took) << "\n";
    ASSERT_NO_FATAL_FAILURE(ExpectSettledAndBalanced(Range(0, node + 1)));
  }
  const client::SteadyTime change_end = Now();
  std::cout << "scaling out from 3 to 5 nodes took "
            << absl::FormatDuration(change_end - change_start) << "\n";
  // The experiment goes on over the new placement.
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(300));

  const std::vector<examples::PipelineReport> reports = load.Finish();
  PrintLeaderlessTimes(watch);
  ExpectEveryPaymentChargedOnce(reports);
  ExpectConsistentHistory();
  EXPECT_EQ(history_.Acknowledged().size(), 2000 * reports.size());
  PrintLatencies("before", load_start, change_start);
  PrintLatencies("during", change_start, change_end);
}

// Five nodes shrink to three under the field experiment: `dedupctl cluster
// remove-node` drains the two, one after the other, until they hold
// nothing and the three left vote for every shard. Removing a third is
// refused: two nodes cannot hold three replicas. The removed nodes are
// then stopped and the three serve on.
TEST_F(ElasticTest, ScaleInUnderLoadFailsNoCallAndEmptiesTheRemovedNodes) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options(5, 0)));
  const absl::Status replicated = cluster_->WaitForFullReplication(kCatchUp);
  ASSERT_TRUE(replicated.ok()) << replicated;
  LeaderWatch watch(cluster_.get());
  const client::SteadyTime load_start = Now();
  FieldLoad load(client_.get(), Payments("scale-in"));
  // Long enough to measure the calls before the change.
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(1500));

  const client::SteadyTime change_start = Now();
  for (int node : {4, 3}) {
    SCOPED_TRACE(absl::StrCat("removing node ", node));
    const DedupctlRun run = Dedupctl({"remove-node", Address(node)});
    ASSERT_EQ(run.status, ExitStatus::Exited(0)) << Describe(run) << "\n"
                                                 << cluster_->OutputTails();
    EXPECT_FALSE(run.out.empty()) << "remove-node printed no progress";
    std::cout << "remove-node " << node << " took " << absl::FormatDuration(run.took) << "\n";
    // Balanced over the nodes left means the removed ones vote for
    // nothing; settled means nothing learns on them either.
    ASSERT_NO_FATAL_FAILURE(ExpectSettledAndBalanced(Range(0, node)));
  }
  const client::SteadyTime change_end = Now();
  std::cout << "scaling in from 5 to 3 nodes took "
            << absl::FormatDuration(change_end - change_start) << "\n";

  const DedupctlRun refused = Dedupctl({"remove-node", Address(2)});
  EXPECT_EQ(refused.status, ExitStatus::Exited(1)) << Describe(refused);
  EXPECT_FALSE(refused.err.empty()) << "remove-node refused without a reason";
  const v1::TopologyResponse after_refusal = ExpectSettledAndBalanced(Range(0, 3));
  const auto& draining = after_refusal.draining_nodes();
  EXPECT_EQ(std::count(draining.begin(), draining.end(), 2u), 0)
      << "a refused remove-node left node 2 draining: " << DescribePlacement(after_refusal);
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(300));

  const std::vector<examples::PipelineReport> reports = load.Finish();
  PrintLeaderlessTimes(watch);
  ExpectEveryPaymentChargedOnce(reports);
  PrintLatencies("before", load_start, change_start);
  PrintLatencies("during", change_start, change_end);

  for (int node : {3, 4}) {
    absl::StatusOr<ExitStatus> stopped = cluster_->StopNode(node);
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << cluster_->Output(node);
  }
  auto leaders = cluster_->WaitForAllShardsLed(kFailover);
  ASSERT_TRUE(leaders.ok()) << leaders.status();
  std::cout << "leaders with nodes 3 and 4 gone: " << Describe(*leaders) << "\n";
  ExpectSettledAndBalanced(Range(0, 3));
  const examples::PipelineReport after =
      examples::RunPaymentPipeline(client_.get(), Payments("after-removal", 500));
  ExpectEveryPaymentChargedOnce({after});
  ExpectConsistentHistory();
  EXPECT_EQ(history_.Acknowledged().size(), 2000 * reports.size() + 500);
}

// Which node of a move is SIGKILLed while its records are being copied.
enum class Victim {
  kSourceLeader,  // The source, which leads the shard.
  kTarget,        // The new node, with the source a follower.
};

void PrintTo(Victim victim, std::ostream* os) {
  *os << (victim == Victim::kSourceLeader ? "the source, leading the shard" : "the target");
}

class ElasticCrashTest : public ElasticTest, public ::testing::WithParamInterface<Victim> {
 protected:
  // Waits until the leader of kMovedShard reports a move to `target` in
  // state "adding" with a second's worth of bytes sent (of some eight),
  // while `mover` still runs.
  absl::StatusOr<v1::ShardMove> AwaitCopying(int target, DedupctlProcess& mover) {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    std::string last = "no answer from the shard's leader";
    while (absl::Now() < give_up) {
      if (std::optional<DedupctlRun> ended = mover.Wait(absl::ZeroDuration())) {
        return absl::FailedPreconditionError(
            absl::StrCat("the move ended before it was seen copying (last seen: ", last,
                         "): ", Describe(*ended), "\n", cluster_->OutputTails()));
      }
      const TopologyAnswers answers = cluster_->AskTopology();
      const Leadership leader = LeadersOf(answers, kShards)[kMovedShard];
      const v1::ShardLeader* shard =
          leader.node < 0 ? nullptr : ShardIn(*answers[leader.node], kMovedShard);
      if (shard != nullptr) {
        last = absl::StrCat("node ", leader.node, " leads: ", shard->ShortDebugString());
        const v1::ShardMove& move = shard->move();
        if (shard->has_move() && move.state() == "adding" &&
            move.to() == static_cast<uint32_t>(target) &&
            move.copied_bytes() >= kMoveBytesPerSecond) {
          return move;
        }
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "no move of shard ", kMovedShard, " to node ", target,
        " was seen copying within 30s; last seen: ", last, "\n", cluster_->OutputTails()));
  }
};

// A throttled `dedupctl cluster move-shard` copies a shard of a few
// thousand completed keys to a fourth node under the field experiment; in
// the middle of the copy the source (leading the shard) or the target is
// SIGKILLed and started again. The move must then complete or roll back,
// as dedupctl's exit code says: either way three live voters and no
// learner, every preloaded key and every acknowledged completion intact.
TEST_P(ElasticCrashTest, CrashDuringMoveCompletesOrRollsBackLosingNothing) {
  ReplicatedClusterOptions options = Options(4, 3);
  options.extra_flags = {absl::StrCat("--move_bytes_per_second=", kMoveBytesPerSecond)};
  ASSERT_NO_FATAL_FAILURE(StartCluster(options, /*client_nodes=*/3));
  const absl::Status replicated = cluster_->WaitForFullReplication(kCatchUp);
  ASSERT_TRUE(replicated.ok()) << replicated;
  std::vector<std::string> problems;
  const std::vector<StoredKey> preloaded =
      Store(*client_, Keys("preload-", kPreloadedKeys, kMovedShard), /*complete=*/true, &problems);
  ASSERT_TRUE(problems.empty()) << problems.size() << " keys not stored:\n" << FirstLines(problems);
  const int target = 3;
  const absl::Status started = cluster_->StartNode(target);
  ASSERT_TRUE(started.ok()) << started;
  const absl::Status live = cluster_->WaitForLive(target, kSettle);
  ASSERT_TRUE(live.ok()) << live;

  auto leaders = cluster_->WaitForAllShardsLed(kFailover);
  ASSERT_TRUE(leaders.ok()) << leaders.status();
  const int leader = (*leaders)[kMovedShard].node;
  // With three nodes and three replicas, every node votes for every shard.
  const int source = GetParam() == Victim::kSourceLeader ? leader : (leader + 1) % 3;
  const int victim = GetParam() == Victim::kSourceLeader ? source : target;
  std::cout << "moving shard " << kMovedShard << " from node " << source << " to node " << target
            << "; node " << leader << " leads it; node " << victim << " will be killed\n";

  LeaderWatch watch(cluster_.get());
  FieldLoad load(client_.get(), Payments("crash-move"));
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(200));
  std::unique_ptr<DedupctlProcess> mover =
      SpawnDedupctl({"move-shard", absl::StrCat(kMovedShard), "--to=" + Address(target),
                     "--from=" + Address(source)});
  ASSERT_NE(mover, nullptr);
  const absl::StatusOr<v1::ShardMove> copying = AwaitCopying(target, *mover);
  ASSERT_TRUE(copying.ok()) << copying.status();
  std::cout << "SIGKILL node " << victim << " during " << copying->ShortDebugString() << "\n";
  cluster_->KillNode(victim);
  const absl::Status back = cluster_->StartNode(victim);
  ASSERT_TRUE(back.ok()) << back;

  const std::optional<DedupctlRun> moved = mover->Wait(kDedupctlTimeout);
  ASSERT_TRUE(moved.has_value()) << mover->command() << " did not end; its output:\n"
                                 << mover->Out() << "\n"
                                 << cluster_->OutputTails();
  std::cout << Describe(*moved) << "\n";
  const absl::StatusOr<v1::TopologyResponse> placement =
      cluster_->WaitForSettledPlacement(kSettleAfterCrash);
  ASSERT_TRUE(placement.ok()) << placement.status();
  std::cout << "placement: " << DescribePlacement(*placement) << "\n";
  const v1::ShardLeader* shard = ShardIn(*placement, kMovedShard);
  ASSERT_NE(shard, nullptr);
  if (moved->status == ExitStatus::Exited(0)) {
    std::cout << "the move completed\n";
    EXPECT_TRUE(VotesFor(*shard, target) && !VotesFor(*shard, source))
        << "dedupctl said the move completed, but the shard is placed "
        << shard->ShortDebugString();
  } else if (moved->status == ExitStatus::Exited(1)) {
    std::cout << "the move was rolled back\n";
    EXPECT_TRUE(VotesFor(*shard, source) && !VotesFor(*shard, target))
        << "dedupctl said the move was rolled back, but the shard is placed "
        << shard->ShortDebugString();
    EXPECT_FALSE(moved->err.empty()) << "a move rolled back without a reason";
  } else {
    ADD_FAILURE() << "move-shard neither completed (0) nor rolled back (1): " << Describe(*moved);
  }
  const absl::Status caught_up = cluster_->WaitForFullReplication(kCatchUp, kBehindUnderLoad);
  ASSERT_TRUE(caught_up.ok()) << caught_up;
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(100));

  const std::vector<examples::PipelineReport> reports = load.Finish();
  PrintLeaderlessTimes(watch);
  ExpectEveryPaymentChargedOnce(reports);
  ExpectConsistentHistory();
  EXPECT_EQ(history_.Acknowledged().size(), 2000 * reports.size());
  const std::vector<std::string> lost = ClaimAgain(*client_, preloaded);
  EXPECT_TRUE(lost.empty()) << lost.size() << " of " << preloaded.size()
                            << " preloaded keys not as stored:\n"
                            << FirstLines(lost);
}

INSTANTIATE_TEST_SUITE_P(Crash, ElasticCrashTest,
                         ::testing::Values(Victim::kSourceLeader, Victim::kTarget),
                         [](const ::testing::TestParamInfo<Victim>& info) {
                           return info.param == Victim::kSourceLeader ? "KillTheSourceLeader"
                                                                      : "KillTheTarget";
                         });

// Keys completed, and keys claimed and left in progress, before the
// cluster grows from three nodes to five and rebalances are answered as
// before afterwards, through a fresh client that knows only the two new
// nodes: a claim of a completed key answers COMPLETED with its token and
// result, a claim of a held key IN_PROGRESS by its holder. With 32
// shards every data directory keeps two shards in each column family
// (storage/data_dir.h), so a move copies, restores and drops one shard's
// key range while the other shard of its family stays.
TEST_F(ElasticTest, SameKeysAfterMovesAnswerAsBefore) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options(5, 3, kSharedFamilyShards), /*client_nodes=*/3));
  const absl::Status replicated = cluster_->WaitForFullReplication(kCatchUp);
  ASSERT_TRUE(replicated.ok()) << replicated;
  std::vector<std::string> problems;
  std::vector<StoredKey> stored = Store(*client_, Keys("kept-", 800), /*complete=*/true, &problems);
  const std::vector<StoredKey> held =
      Store(*client_, Keys("held-", 48), /*complete=*/false, &problems);
  ASSERT_TRUE(problems.empty()) << problems.size() << " keys not stored:\n" << FirstLines(problems);
  stored.insert(stored.end(), held.begin(), held.end());

  for (int node : {3, 4}) {
    const absl::Status started = cluster_->StartNode(node);
    ASSERT_TRUE(started.ok()) << started;
    const DedupctlRun run = Dedupctl({"add-node", Address(node)});
    ASSERT_EQ(run.status, ExitStatus::Exited(0)) << Describe(run) << "\n"
                                                 << cluster_->OutputTails();
  }
  const DedupctlRun rebalanced = Dedupctl({"rebalance"});
  ASSERT_EQ(rebalanced.status, ExitStatus::Exited(0)) << Describe(rebalanced);
  const v1::TopologyResponse placement = ExpectSettledAndBalanced(Range(0, 5));
  int moved = 0;
  for (const v1::ShardLeader& shard : placement.leaders()) {
    moved += VotesFor(shard, 3) || VotesFor(shard, 4) ? 1 : 0;
  }
  std::cout << moved << " of " << cluster_->shards() << " shards have moved onto node 3 or 4\n";

  client::ClientOptions fresh_options;
  fresh_options.endpoint = absl::StrCat(Address(3), ",", Address(4));
  fresh_options.default_timeout = kCallTimeout;
  auto fresh = client::Client::Create(fresh_options);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const std::vector<std::string> changed = ClaimAgain(**fresh, stored);
  EXPECT_TRUE(changed.empty()) << changed.size() << " of " << stored.size()
                               << " keys not answered as stored:\n"
                               << FirstLines(changed);
}

// A node whose data directory has another shard count than the cluster
// would route keys to other shards than its peers do: it is refused before
// it joins, with the count the cluster has, and the cluster serves on.
TEST_F(ElasticTest, ANodeWithAnotherShardCountIsRefused) {
  ReplicatedClusterOptions options = Options(4, 3);
  options.node_flags[3] = {"--shards=32"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(options, /*client_nodes=*/3));
  const absl::Status started = cluster_->StartNode(3);
  ASSERT_FALSE(started.ok()) << "a node with 32 shards joined a cluster of 16";
  EXPECT_NE(started.message().find("has 32 shards but the cluster has 16"), std::string::npos)
      << started;
  EXPECT_NE(started.message().find("--shards=16"), std::string::npos) << started;

  // A cluster from before the count was recorded in etcd: the placement
  // keys of its 16 shards tell the count, and a node of 16 records it.
  server::cluster::EtcdOptions etcd_options;
  etcd_options.endpoints = {cluster_->etcd().endpoint()};
  auto etcd = server::cluster::EtcdClient::Connect(etcd_options);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string count_key = "/dedup/elastic-test/shard-count";
  const absl::StatusOr<std::optional<server::cluster::EtcdKeyValue>> recorded =
      (*etcd)->Get(count_key);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  ASSERT_TRUE(recorded->has_value()) << "the cluster's shard count is not in etcd";
  EXPECT_EQ((*recorded)->value, "16");
  ASSERT_TRUE((*etcd)->Delete(count_key).ok());
  const absl::Status unrecorded = cluster_->StartNode(3);
  ASSERT_FALSE(unrecorded.ok()) << "a node with 32 shards joined a cluster placing 16";
  EXPECT_NE(unrecorded.message().find("has 32 shards but the cluster has 16 (etcd holds the "
                                      "placement of that many)"),
            std::string::npos)
      << unrecorded;
  const absl::Status restarted = cluster_->RestartNode(0);
  ASSERT_TRUE(restarted.ok()) << restarted;
  const absl::StatusOr<std::optional<server::cluster::EtcdKeyValue>> again =
      (*etcd)->Get(count_key);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(again->has_value()) << "a restarted node of the cluster did not record its count";
  EXPECT_EQ((*again)->value, "16");

  const absl::StatusOr<std::vector<Leadership>> led =
      cluster_->WaitForAllShardsLed(absl::Seconds(10));
  EXPECT_TRUE(led.ok()) << led.status();
}

// Nodes started without --shards: those that create a cluster record 1,024
// shards in etcd, room for hundreds of nodes (docs/elastic.md §1), and a
// node added later takes the cluster's count, here one created with 32.
TEST_F(ElasticTest, NodesWithoutAShardCountTakeTheClusters) {
  ReplicatedClusterOptions fresh = Options(2, 0, /*shards=*/0);
  fresh.replication_factor = 2;
  auto created = ReplicatedCluster::Start(dir_.path(), fresh);
  ASSERT_TRUE(created.ok()) << created.status();
  TopologyAnswers answers = (*created)->AskTopology(absl::Seconds(2));
  for (int node : {0, 1}) {
    ASSERT_TRUE(answers[node].has_value()) << (*created)->OutputTails();
    EXPECT_EQ(answers[node]->shard_count(), 1024u) << "node " << node;
  }
  created->reset();

  ReplicatedClusterOptions grown = Options(4, 3, /*shards=*/0);
  for (int node : {0, 1, 2}) grown.node_flags[node] = {"--shards=32"};
  auto cluster = ReplicatedCluster::Start(dir_.Sub("grown"), grown);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const absl::Status started = (*cluster)->StartNode(3);
  ASSERT_TRUE(started.ok()) << started;
  answers = (*cluster)->AskTopology(absl::Seconds(2));
  ASSERT_TRUE(answers[3].has_value()) << (*cluster)->OutputTails();
  EXPECT_EQ(answers[3]->shard_count(), 32u);
}

}  // namespace
}  // namespace dedup::blackbox
