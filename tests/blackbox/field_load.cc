#include "tests/blackbox/field_load.h"

#include <algorithm>
#include <iostream>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "storage/key_codec.h"

namespace dedup::blackbox {
namespace {

// The epoch of the leader that acknowledged a claim with `token`.
uint64_t EpochOfToken(uint64_t token) { return token >> 40; }

}  // namespace

FieldLoad::~FieldLoad() {
  abandon_.store(true);
  Finish();
}

std::vector<examples::PipelineReport> FieldLoad::Finish() {
  if (thread_.joinable()) {
    last_round_.Notify();
    thread_.join();
  }
  return reports_;
}

void FieldLoad::Run() {
  for (int round = 1; round == 1 || !last_round_.HasBeenNotified(); ++round) {
    examples::PipelineOptions options = round_;
    options.run_id = absl::StrCat(round_.run_id, "-", round);
    options.stop = &abandon_;
    reports_.push_back(examples::RunPaymentPipeline(client_, options));
  }
}

std::string Summary(const examples::PipelineReport& r) {
  return absl::StrCat("charges=", r.charges, " double_charged_keys=", r.double_charged_keys,
                      " executed=", r.executed, " duplicates=", r.duplicates,
                      " in_progress=", r.in_progress, " errors=", r.errors);
}

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
      acquired[storage::ShardOf(kPaymentNs, op.key, shards)].push_back(&op);
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

std::string FirstLines(const std::vector<std::string>& lines, size_t n) {
  std::string text = absl::StrJoin(lines.begin(), lines.begin() + std::min(n, lines.size()), "\n");
  if (lines.size() > n) absl::StrAppend(&text, "\n... and ", lines.size() - n, " more");
  return text;
}

std::string AwaitAllApplied(const ReplicatedCluster& cluster, absl::Duration timeout,
                            uint64_t* entries_in_logs) {
  const absl::Time give_up = absl::Now() + timeout;
  std::string behind;
  do {
    behind.clear();
    uint64_t entries = 0;
    const TopologyAnswers answers = cluster.AskTopology();
    const std::vector<Leadership> leaders = LeadersOf(answers, cluster.shards());
    for (uint32_t shard = 0; shard < leaders.size() && behind.empty(); ++shard) {
      if (leaders[shard].node < 0 || !answers[leaders[shard].node].has_value()) {
        behind = absl::StrCat("shard ", shard, " has no leader that answers");
        break;
      }
      for (const v1::ShardLeader& led : answers[leaders[shard].node]->leaders()) {
        if (led.shard() != shard) continue;
        const uint64_t last = led.replicas_size() > 0 ? led.replicas(0).last_seq() : 0;
        entries += last;
        if (led.replicas_size() != 3) behind = led.ShortDebugString();
        for (const v1::ReplicaStatus& replica : led.replicas()) {
          if (replica.last_seq() != last || replica.applied_seq() != last) {
            behind = absl::StrCat("shard ", shard, ": ", led.ShortDebugString());
          }
        }
      }
    }
    if (entries_in_logs != nullptr) *entries_in_logs = entries;
    if (!behind.empty()) absl::SleepFor(absl::Milliseconds(100));
  } while (!behind.empty() && absl::Now() < give_up);
  return behind;
}

std::vector<std::string> ProbeKeys(uint32_t shards, const std::string& prefix) {
  std::vector<std::string> keys(shards);
  for (int i = 0, found = 0; found < static_cast<int>(shards); ++i) {
    const std::string key = absl::StrCat(prefix, i);
    std::string& slot = keys[storage::ShardOf(kPaymentNs, key, shards)];
    if (slot.empty()) {
      slot = key;
      ++found;
    }
  }
  return keys;
}

void FieldExperimentTest::StartCluster(ReplicatedClusterOptions options, int client_nodes,
                                       absl::Duration first_election) {
  auto cluster = ReplicatedCluster::Start(dir_.path(), options);
  ASSERT_TRUE(cluster.ok()) << "the replicated cluster did not start: " << cluster.status();
  cluster_ = std::move(*cluster);
  auto leaders = cluster_->WaitForAllShardsLed(first_election);
  ASSERT_TRUE(leaders.ok()) << leaders.status();
  std::cout << "leaders: " << Describe(*leaders) << "\n";
  client::ClientOptions client_options;
  client_options.endpoint =
      client_nodes > 0 ? cluster_->Endpoints(client_nodes) : cluster_->Endpoints();
  client_options.default_timeout = kCallTimeout;
  auto client = client::Client::Create(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  client_ = std::move(*client);
}

examples::PipelineOptions FieldExperimentTest::Payments(const std::string& run_id, int payments) {
  examples::PipelineOptions options;
  options.payments = payments;
  options.threads = 8;
  options.redeliver_every = 20;
  options.charge_time = absl::Milliseconds(1);
  options.ns = kPaymentNs;
  options.run_id = run_id;
  options.on_guard_run = history_.Hook();
  return options;
}

void FieldExperimentTest::AwaitProgress(int64_t more, absl::Duration timeout) {
  const int64_t target = history_.runs() + more;
  const absl::Time give_up = absl::Now() + timeout;
  while (history_.runs() < target) {
    ASSERT_LT(absl::Now(), give_up) << "the field experiment made no progress: " << history_.runs()
                                    << " runs of " << target << "\n"
                                    << cluster_->OutputTails();
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void FieldExperimentTest::ExpectEveryPaymentChargedOnce(
    const std::vector<examples::PipelineReport>& reports) {
  for (size_t round = 0; round < reports.size(); ++round) {
    const examples::PipelineReport& r = reports[round];
    std::cout << "round " << round + 1 << ": " << Summary(r) << "\n";
    EXPECT_EQ(r.charges, r.payments) << "round " << round + 1;
    EXPECT_EQ(r.double_charged_keys, 0) << "round " << round + 1;
    EXPECT_EQ(r.errors, 0) << "round " << round + 1 << ": calls failed past the client's retries";
  }
}

void FieldExperimentTest::ExpectNoPaymentChargedTwice(
    const std::vector<examples::PipelineReport>& reports) {
  for (size_t round = 0; round < reports.size(); ++round) {
    const examples::PipelineReport& r = reports[round];
    std::cout << "round " << round + 1 << ": " << Summary(r) << "\n";
    EXPECT_LE(r.charges, r.payments) << "round " << round + 1 << ": duplicates got through";
    EXPECT_EQ(r.double_charged_keys, 0) << "round " << round + 1;
  }
}

std::vector<std::string> FieldExperimentTest::LostCompletions() {
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
      query.set_namespace_(kPaymentNs);
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

void FieldExperimentTest::ExpectConsistentHistory() {
  const std::vector<test::HistoryOp> ops = history_.Ops();
  std::cout << "history: " << ops.size() << " calls, " << history_.Acknowledged().size()
            << " acknowledged completions\n";
  const std::vector<std::string> violations = test::CheckHistory(ops);
  EXPECT_TRUE(violations.empty()) << violations.size() << " violations, the first ones:\n"
                                  << FirstLines(violations);
  const std::vector<std::string> late = LateAcquisitions(ops, cluster_->shards());
  EXPECT_TRUE(late.empty()) << late.size()
                            << " claims acknowledged by a replaced leader, the first ones:\n"
                            << FirstLines(late);
  const std::vector<std::string> lost = LostCompletions();
  EXPECT_TRUE(lost.empty()) << lost.size() << " acknowledged completions lost, the first ones:\n"
                            << FirstLines(lost);
}

void FieldExperimentTest::PrintLeaderlessTimes(LeaderWatch& watch) {
  watch.Stop();
  std::cout << "time without a leader, per shard:\n" << watch.times().Report();
  EXPECT_TRUE(watch.conflicts().empty())
      << "two nodes led one shard at one epoch: " << absl::StrJoin(watch.conflicts(), "; ");
}

void FieldExperimentTest::AwaitCaughtUpUnderLoad() {
  const absl::Status caught_up = cluster_->WaitForFullReplication(kCatchUp, kBehindUnderLoad);
  ASSERT_TRUE(caught_up.ok()) << caught_up;
  ASSERT_NO_FATAL_FAILURE(AwaitProgress(200));
}

std::vector<examples::PipelineReport> FieldExperimentTest::FinishWithoutDoubleCharges(
    FieldLoad& load, LeaderWatch& watch) {
  std::vector<examples::PipelineReport> reports = load.Finish();
  PrintLeaderlessTimes(watch);
  ExpectNoPaymentChargedTwice(reports);
  ExpectConsistentHistory();
  return reports;
}

void NetworkExperimentTest::SetUp() {
  absl::StatusOr<std::unique_ptr<NetworkLab>> lab = NetworkLab::Create(lab_nodes_);
  ASSERT_TRUE(lab.ok()) << "these tests make network namespaces, which needs root, iproute2 "
                           "and nftables (deploy/install-deps.sh): "
                        << lab.status();
  lab_ = std::move(*lab);
  // Before the first gRPC channel starts any thread.
  const absl::Status entered = lab_->EnterHub();
  ASSERT_TRUE(entered.ok()) << entered;
}

std::optional<absl::Duration> NetworkExperimentTest::AwaitEveryShardLedOutside(
    const std::vector<int>& nodes, absl::Time since) {
  const absl::Time give_up = absl::Now() + kFailover;
  std::vector<Leadership> leaders;
  for (;;) {
    leaders = cluster_->Leaders();
    const bool done = std::all_of(leaders.begin(), leaders.end(), [&](const Leadership& l) {
      return l.node >= 0 && std::find(nodes.begin(), nodes.end(), l.node) == nodes.end();
    });
    if (done) break;
    if (absl::Now() > give_up) {
      ADD_FAILURE() << "nodes " << absl::StrJoin(nodes, ", ")
                    << " still lead shards, or some have no leader, "
                    << absl::FormatDuration(absl::Now() - since)
                    << " into the fault: " << Describe(leaders) << "\n"
                    << cluster_->OutputTails();
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const absl::Duration took = absl::Now() - since;
  std::cout << "every shard led by a node other than " << absl::StrJoin(nodes, ", ") << " "
            << absl::FormatDuration(took) << " into the fault\n";
  return took;
}

void NetworkExperimentTest::TearDown() {
  client_.reset();
  cluster_.reset();
}

}  // namespace dedup::blackbox
