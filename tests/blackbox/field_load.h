#ifndef DEDUP_TESTS_BLACKBOX_FIELD_LOAD_H_
#define DEDUP_TESTS_BLACKBOX_FIELD_LOAD_H_

// The field experiment (client/examples/payment_pipeline.h: 2,000
// payments, 8 workers, one payment in 20 delivered twice at once, the guard
// on every worker) run against a replicated cluster while a test changes
// it, and what every such test holds the cluster to:
//  - no acknowledged write is lost: every acknowledged Complete reads back
//    COMPLETED with its result;
//  - no duplicate gets through: every payment is charged exactly once;
//  - no call fails beyond the client's own retries;
//  - the history of every call keeps the promises of
//    tests/common/history_checker.h, and no claim is acknowledged by a
//    leader that was already replaced.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/examples/payment_pipeline.h"
#include "dedup/client/client.h"
#include "gtest/gtest.h"
#include "tests/blackbox/leader_watch.h"
#include "tests/blackbox/network_lab.h"
#include "tests/blackbox/pipeline_history.h"
#include "tests/blackbox/replicated_cluster.h"
#include "tests/common/history_checker.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {

// The namespace of the field experiment's payments.
inline constexpr char kPaymentNs[] = "payment-callback";
// The first election, with etcd and every node just started.
inline constexpr absl::Duration kFirstElection = absl::Seconds(30);
// A lease (2 s) running out, then an election.
inline constexpr absl::Duration kFailover = absl::Seconds(20);
inline constexpr absl::Duration kCatchUp = absl::Seconds(60);
// Under load a live follower is always a few entries behind.
inline constexpr uint64_t kBehindUnderLoad = 64;
// Long enough for a call to ride out a failover on the client's retries.
inline constexpr absl::Duration kCallTimeout = absl::Seconds(10);

// The field experiment, round after round (2,000 payments each, run ids
// "<run_id>-1", "<run_id>-2", ...), on a thread of its own until Finish:
// load that lasts as long as the faults a test injects, however fast the
// cluster turns out to be.
//
// Construct, Finish and destroy on one thread.
class FieldLoad {
 public:
  FieldLoad(client::Client* client, examples::PipelineOptions round)
      : client_(client), round_(std::move(round)), thread_([this] { Run(); }) {}

  // A test that gave up midway: the round under way is cut short, so that a
  // broken cluster does not keep it waiting on every call's deadline.
  ~FieldLoad();

  FieldLoad(const FieldLoad&) = delete;
  FieldLoad& operator=(const FieldLoad&) = delete;

  // Lets the round under way end, then returns every round's report.
  std::vector<examples::PipelineReport> Finish();

 private:
  void Run();

  client::Client* const client_;
  const examples::PipelineOptions round_;
  absl::Notification last_round_;
  std::atomic<bool> abandon_{false};
  std::vector<examples::PipelineReport> reports_;  // The thread's until joined.
  std::thread thread_;                             // Last: starts once the rest is built.
};

// "charges=2000 double_charged_keys=0 ...": one round's report in a line.
std::string Summary(const examples::PipelineReport& report);

// Claims acknowledged by a replaced leader: once a claim of a shard was
// answered ACQUIRED under epoch e, a claim of that shard sent afterwards
// and answered ACQUIRED under an epoch below e came from a leader that was
// no longer the shard's (a leader of epoch e hands out the tokens
// e * 2^40 + 1, + 2, ..., docs/replication.md). One line each; the keys
// are in kPaymentNs.
std::vector<std::string> LateAcquisitions(const std::vector<test::HistoryOp>& ops, uint32_t shards);

// The first `n` of `lines`, one per line, then how many were left out.
std::string FirstLines(const std::vector<std::string>& lines, size_t n = 20);

// Waits up to `timeout` until every replica of every shard (three each)
// has applied its leader's whole log; what is not then, "" when all are.
// `entries_in_logs`: the entries of every shard's log, as its leader holds
// them, at the last look.
std::string AwaitAllApplied(const ReplicatedCluster& cluster, absl::Duration timeout,
                            uint64_t* entries_in_logs = nullptr);

// A key of kPaymentNs in each shard, in shard order, each `prefix` and a
// number: for reaching one shard at a time.
std::vector<std::string> ProbeKeys(uint32_t shards, const std::string& prefix = "probe-");

// A test of a replicated cluster under the field experiment: a cluster in
// a fresh directory, a client of it, and the history of every guard run.
class FieldExperimentTest : public ::testing::Test {
 protected:
  // Starts etcd and the nodes, waits for every shard's first leader and
  // connects a client to the first `client_nodes` nodes (0: every node).
  // Waits up to `first_election` for every shard to be led.
  void StartCluster(ReplicatedClusterOptions options = {}, int client_nodes = 0,
                    absl::Duration first_election = kFirstElection);

  // One round of the field experiment, every guard run recorded.
  examples::PipelineOptions Payments(const std::string& run_id, int payments = 2000);

  // Waits until `more` guard runs have been recorded since the call, so
  // that the next fault strikes a cluster under load.
  void AwaitProgress(int64_t more, absl::Duration timeout = absl::Seconds(30));

  // Every payment of every round charged exactly once, with no call left
  // without an answer.
  static void ExpectEveryPaymentChargedOnce(const std::vector<examples::PipelineReport>& reports);

  // No payment of any round charged twice; some may be uncharged, their
  // calls failed (a fault that outlasts the client's deadline).
  static void ExpectNoPaymentChargedTwice(const std::vector<examples::PipelineReport>& reports);

  // Reads back every acknowledged completion: one line for each that does
  // not read COMPLETED with the result that was acknowledged.
  std::vector<std::string> LostCompletions();

  // Every history promise, over every call recorded, and every
  // acknowledged completion read back.
  void ExpectConsistentHistory();

  // Stops `watch`, prints how long each shard went without a leader and
  // expects no two nodes to have led one shard at one epoch.
  static void PrintLeaderlessTimes(LeaderWatch& watch);

  // After a fault is healed: waits until every replica holds its leader's
  // log again (kCatchUp), then for more guard runs under the load.
  void AwaitCaughtUpUnderLoad();

  // Ends `load` after a fault that may have outlasted calls' deadlines:
  // the leaderless times of `watch`, no payment charged twice (some may be
  // uncharged) and the history consistent. Returns every round's report.
  std::vector<examples::PipelineReport> FinishWithoutDoubleCharges(FieldLoad& load,
                                                                   LeaderWatch& watch);

  // Destroyed in reverse: the client before the cluster it talks to.
  test::TempDir dir_;
  PipelineHistory history_;
  std::unique_ptr<ReplicatedCluster> cluster_;
  std::unique_ptr<client::Client> client_;
};

// The field experiment with each node in a network namespace of its own
// (network_lab.h), `nodes` of them; the test process runs in the lab's
// hub, beside etcd.
class NetworkExperimentTest : public FieldExperimentTest {
 protected:
  explicit NetworkExperimentTest(int nodes) : lab_nodes_(nodes) {}
  void SetUp() override;
  // The client and the cluster's processes go before the namespaces they
  // live in.
  void TearDown() override;

  // Waits, up to kFailover, until every shard is led by a node outside
  // `nodes` (those a fault cut off), and returns how long that took from
  // `since`, when the fault began. When it does not happen in time: a
  // failure, with who leads what and the nodes' output, and nullopt.
  std::optional<absl::Duration> AwaitEveryShardLedOutside(const std::vector<int>& nodes,
                                                          absl::Time since);

  std::unique_ptr<NetworkLab> lab_;

 private:
  const int lab_nodes_;
};

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_FIELD_LOAD_H_
