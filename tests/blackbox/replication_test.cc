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
#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/examples/payment_pipeline.h"
#include "dedup/client/client.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"
#include "tests/blackbox/leader_watch.h"
#include "tests/blackbox/pipeline_history.h"
#include "tests/blackbox/replicated_cluster.h"
#include "tests/common/history_checker.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {
namespace {

using ::dedup::test::CheckHistory;
using ::dedup::test::TempDir;

constexpr char kNs[] = "payment-callback";
// The first election, with etcd and every node just started.
constexpr absl::Duration kFirstElection = absl::Seconds(30);
// A lease (2 s) running out, then an election.
constexpr absl::Duration kFailover = absl::Seconds(20);
constexpr absl::Duration kCatchUp = absl::Seconds(60);
// Under load a live follower is always a few entries behind.
constexpr uint64_t kBehindUnderLoad = 64;
// Long enough for a call to ride out a failover on the client's retries.
constexpr absl::Duration kCallTimeout = absl::Seconds(10);

// The field experiment, round after round (2,000 payments each, run ids
// "<run_id>-1", "<run_id>-2", ...), on a thread of its own until Finish:
// load that lasts as long as the faults a test injects, however fast the
// cluster turns out to be.
class FieldLoad {
 public:
  FieldLoad(client::Client* client, examples::PipelineOptions round)
      : client_(client), round_(std::move(round)), thread_([this] { Run(); }) {}

  // A test that gave up midway: the round under way is cut short, so that a
  // broken cluster does not keep it waiting on every call's deadline.
  ~FieldLoad() {
    abandon_.store(true);
    Finish();
  }

  // Lets the round under way end, then returns every round's report.
  std::vector<examples::PipelineReport> Finish() {
    if (thread_.joinable()) {
      last_round_.Notify();
      thread_.join();
    }
    return reports_;
  }

 private:
  void Run() {
    for (int round = 1; round == 1 || !last_round_.HasBeenNotified(); ++round) {
      examples::PipelineOptions options = round_;
      options.run_id = absl::StrCat(round_.run_id, "-", round);
      options.stop = &abandon_;
      reports_.push_back(examples::RunPaymentPipeline(client_, options));
    }
  }

  client::Client* const client_;
  const examples::PipelineOptions round_;
  absl::Notification last_round_;
  std::atomic<bool> abandon_{false};
  std::vector<examples::PipelineReport> reports_;  // The thread's until joined.
  std::thread thread_;
};

std::string Summary(const examples::PipelineReport& r) {
  return absl::StrCat("charges=", r.charges, " double_charged_keys=", r.double_charged_keys,
                      " executed=", r.executed, " duplicates=", r.duplicates,
                      " in_progress=", r.in_progress, " errors=", r.errors);
}

// A leader of epoch e hands out the tokens e * 2^40 + 1, + 2, ...
// (docs/replication.md): the epoch of the leader that acknowledged a claim.
uint64_t EpochOfToken(uint64_t token) { return token >> 40; }

// Claims acknowledged by a replaced leader: once a claim of a shard was
// answered ACQUIRED under epoch e, a claim of that shard sent afterwards
// and answered ACQUIRED under an epoch below e came from a leader that
// was no longer the shard's. One line each.
std::vector<std::string> LateAcquisitions(const std::vector<test::HistoryOp>& ops,
                                          uint32_t shards) {
  // Per shard: the acquisitions in the order they returned, with the
  // highest epoch answered so far.
  struct Answered {
    int64_t returned;
    uint64_t epoch_so_far;
  };
  std::vector<std::vector<const test::HistoryOp*>> acquired(shards);
  for (const test::HistoryOp& op : ops) {
    if (op.kind == test::HistoryOp::Kind::kClaim &&
        op.answer == test::HistoryOp::Answer::kAcquired) {
      acquired[storage::ShardOf(kNs, op.key, shards)].push_back(&op);
    }
  }
  std::vector<std::string> late;
  for (uint32_t s = 0; s < shards; ++s) {
    std::vector<const test::HistoryOp*>& claims = acquired[s];
    std::sort(claims.begin(), claims.end(), [](const test::HistoryOp* a, const test::HistoryOp* b) {
      return a->returned < b->returned;
    });
    std::vector<Answered> answered;
    for (const test::HistoryOp* op : claims) {
      const uint64_t before = answered.empty() ? 0 : answered.back().epoch_so_far;
      answered.push_back({op->returned, std::max(before, EpochOfToken(op->token))});
    }
    for (const test::HistoryOp* op : claims) {
      // The last acquisition that returned before this claim was sent.
      auto it =
          std::lower_bound(answered.begin(), answered.end(), op->invoked,
                           [](const Answered& a, int64_t invoked) { return a.returned < invoked; });
      if (it == answered.begin()) continue;
      const uint64_t epoch_then = std::prev(it)->epoch_so_far;
      if (EpochOfToken(op->token) < epoch_then) {
        late.push_back(absl::StrCat("shard ", s, ": ", op->key, " acquired with token ", op->token,
                                    " of epoch ", EpochOfToken(op->token), ", sent after epoch ",
                                    epoch_then, " had answered"));
      }
    }
  }
  return late;
}

class ReplicationTest : public ::testing::Test {
 protected:
  // Starts etcd and the nodes, waits for every shard's first leader and
  // connects a client to every node.
  void StartCluster(ReplicatedClusterOptions options = {}) {
    auto cluster = ReplicatedCluster::Start(dir_.path(), options);
    ASSERT_TRUE(cluster.ok()) << "the replicated cluster did not start: " << cluster.status();
    cluster_ = std::move(*cluster);
    auto leaders = cluster_->WaitForAllShardsLed(kFirstElection);
    ASSERT_TRUE(leaders.ok()) << leaders.status();
    std::cout << "leaders: " << Describe(*leaders) << "\n";
    client::ClientOptions client_options;
    client_options.endpoint = cluster_->Endpoints();
    client_options.default_timeout = kCallTimeout;
    auto client = client::Client::Create(client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // One round of the field experiment, every guard run recorded.
  examples::PipelineOptions Payments(const std::string& run_id, int payments = 2000) {
    examples::PipelineOptions options;
    options.payments = payments;
    options.threads = 8;
    options.redeliver_every = 20;
    options.charge_time = absl::Milliseconds(1);
    options.ns = kNs;
    options.run_id = run_id;
    options.on_guard_run = history_.Hook();
    return options;
  }

  // Waits until `more` guard runs have been recorded since the call, so
  // that the next fault strikes a cluster under load.
  void AwaitProgress(int64_t more, absl::Duration timeout = absl::Seconds(30)) {
    const int64_t target = history_.runs() + more;
    const absl::Time give_up = absl::Now() + timeout;
    while (history_.runs() < target) {
      ASSERT_LT(absl::Now(), give_up)
          << "the field experiment made no progress: " << history_.runs() << " runs of " << target
          << "\n"
          << cluster_->OutputTails();
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  // Every payment of every round charged exactly once, with no call left
  // without an answer.
  static void ExpectEveryPaymentChargedOnce(const std::vector<examples::PipelineReport>& reports) {
    for (size_t round = 0; round < reports.size(); ++round) {
      const examples::PipelineReport& r = reports[round];
      std::cout << "round " << round + 1 << ": " << Summary(r) << "\n";
      EXPECT_EQ(r.charges, r.payments) << "round " << round + 1;
      EXPECT_EQ(r.double_charged_keys, 0) << "round " << round + 1;
      EXPECT_EQ(r.errors, 0) << "round " << round + 1 << ": calls failed past the client's retries";
    }
  }

  // Reads back every acknowledged completion: one line for each that does
  // not read COMPLETED with the result that was acknowledged.
  std::vector<std::string> LostCompletions() {
    const std::map<std::string, std::string> acknowledged = history_.Acknowledged();
    absl::Mutex mu;
    std::vector<std::string> lost;
    constexpr size_t kWindow = 256;  // Queries in the air at once.
    auto it = acknowledged.begin();
    while (it != acknowledged.end()) {
      const size_t batch =
          std::min<size_t>(kWindow, static_cast<size_t>(std::distance(it, acknowledged.end())));
      absl::BlockingCounter pending(static_cast<int>(batch));
      for (size_t i = 0; i < batch; ++i, ++it) {
        v1::QueryRequest query;
        query.set_namespace_(kNs);
        query.set_key(it->first);
        client_->QueryAsync(query, [&, key = it->first,
                                    result = it->second](absl::StatusOr<v1::QueryResponse> answer) {
          std::string problem;
          if (!answer.ok()) {
            problem = absl::StrCat(key, ": Query failed: ", answer.status().ToString());
          } else if (answer->record().state() != v1::STATE_COMPLETED ||
                     answer->record().result() != result) {
            problem = absl::StrCat(key, ": acknowledged '", result, "' but reads ",
                                   answer->record().ShortDebugString());
          }
          if (!problem.empty()) {
            absl::MutexLock lock(&mu);
            lost.push_back(std::move(problem));
          }
          pending.DecrementCount();
        });
      }
      pending.Wait();
    }
    return lost;
  }

  // Every history promise, over every call recorded.
  void ExpectConsistentHistory() {
    const std::vector<test::HistoryOp> ops = history_.Ops();
    std::cout << "history: " << ops.size() << " calls, " << history_.Acknowledged().size()
              << " acknowledged completions\n";
    const std::vector<std::string> violations = CheckHistory(ops);
    EXPECT_TRUE(violations.empty())
        << violations.size() << " violations, the first ones:\n"
        << absl::StrJoin(violations.begin(),
                         violations.begin() + std::min<size_t>(violations.size(), 20), "\n");
    const std::vector<std::string> late = LateAcquisitions(ops, cluster_->shards());
    EXPECT_TRUE(late.empty()) << late.size()
                              << " claims acknowledged by a replaced leader, the first ones:\n"
                              << absl::StrJoin(late.begin(),
                                               late.begin() + std::min<size_t>(late.size(), 20),
                                               "\n");
    const std::vector<std::string> lost = LostCompletions();
    EXPECT_TRUE(lost.empty()) << lost.size() << " acknowledged completions lost, the first ones:\n"
                              << absl::StrJoin(lost.begin(),
                                               lost.begin() + std::min<size_t>(lost.size(), 20),
                                               "\n");
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

  static void PrintLeaderlessTimes(LeaderWatch& watch) {
    watch.Stop();
    std::cout << "time without a leader, per shard:\n" << watch.times().Report();
    EXPECT_TRUE(watch.conflicts().empty())
        << "two nodes led one shard at one epoch: " << absl::StrJoin(watch.conflicts(), "; ");
  }

  // Destroyed in reverse: the client before the cluster it talks to.
  TempDir dir_;
  PipelineHistory history_;
  std::unique_ptr<ReplicatedCluster> cluster_;
  std::unique_ptr<client::Client> client_;
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
// longer than its lease; the others elect new leaders; then it wakes up
// believing it still leads. It must not answer as a leader any more: no
// payment is charged twice and the history holds.
TEST_F(ReplicationTest, PausedLeaderWakesFencedAndNoPaymentIsChargedTwice) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
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
  std::cout << "new leaders: " << Describe(*after) << "\n";
  // Longer than the lease, whatever the election took.
  absl::SleepFor(std::max(absl::ZeroDuration(), paused_at + cluster_->options().leader_lease +
                                                    absl::Seconds(1) - absl::Now()));
  cluster_->ResumeNode(victim);
  std::cout << "SIGCONT node " << victim << " after "
            << absl::FormatDuration(absl::Now() - paused_at) << "\n";
  // Clients that still route to it meet it awake.
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(300));

  const std::vector<examples::PipelineReport> reports = load.Finish();
  PrintLeaderlessTimes(watch);
  for (size_t round = 0; round < reports.size(); ++round) {
    const examples::PipelineReport& r = reports[round];
    std::cout << "round " << round + 1 << ": " << Summary(r) << "\n";
    EXPECT_LE(r.charges, r.payments) << "round " << round + 1 << ": duplicates got through";
    EXPECT_EQ(r.double_charged_keys, 0) << "round " << round + 1;
  }
  ExpectConsistentHistory();
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

// Every node in turn gets SIGTERM while the field experiment runs, as a
// rolling upgrade does: a leader hands its shards to an up-to-date follower
// before it exits, so not one call fails beyond the client's own retries.
TEST_F(ReplicationTest, RollingRestartUnderLoadFailsNoCall) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  FieldLoad load(client_.get(), Payments("roll"));
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(200));

  const client::Clock& clock = *client::SystemClock::Default();
  const client::SteadyTime roll_start = clock.SteadyNow();
  for (int node = 0; node < cluster_->size(); ++node) {
    SCOPED_TRACE(absl::StrCat("node ", node));
    std::cout << "SIGTERM node " << node << "; leaders were " << Describe(cluster_->Leaders())
              << "\n";
    const absl::Status restarted = cluster_->RestartNode(node);
    ASSERT_TRUE(restarted.ok()) << restarted;
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
}

// A key of each shard, for reading one shard at a time.
std::vector<std::string> ProbeKeys(uint32_t shards) {
  std::vector<std::string> keys(shards);
  for (int i = 0, found = 0; found < static_cast<int>(shards); ++i) {
    const std::string key = absl::StrCat("probe-", i);
    std::string& slot = keys[storage::ShardOf(kNs, key, shards)];
    if (slot.empty()) {
      slot = key;
      ++found;
    }
  }
  return keys;
}

// How each node answers a Query of `key` now.
std::vector<grpc::StatusCode> QueryEveryNode(const ReplicatedCluster& cluster,
                                             const std::string& key) {
  std::vector<grpc::StatusCode> codes;
  for (int node = 0; node < cluster.size(); ++node) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    v1::QueryRequest query;
    query.set_namespace_(kNs);
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
    claim.set_namespace_(kNs);
    claim.set_key(key);
    claim.set_owner("prober");
    auto claimed = client_->Claim(claim);
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    v1::CompleteRequest complete;
    complete.set_namespace_(kNs);
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
  refused.set_namespace_(kNs);
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
    query.set_namespace_(kNs);
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
