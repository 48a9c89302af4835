// The replication tests' harness, checked on what any dedupd serves: a
// statically sharded cluster (no replication flags, no etcd), where the
// owner of each shard leads it. Nodes start on fixed addresses, die, pause,
// stop, lose their data and come back by process id; leadership and its
// gaps are read from Topology; the field experiment's calls are recorded
// into a history the checker accepts.
#include "tests/blackbox/replicated_cluster.h"

#include <signal.h>

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/examples/payment_pipeline.h"
#include "dedup/client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/blackbox/leader_watch.h"
#include "tests/blackbox/pipeline_history.h"
#include "tests/common/history_checker.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {
namespace {

using ::dedup::test::CheckHistory;
using ::dedup::test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr absl::Duration kWait = absl::Seconds(15);

class ReplicatedClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ReplicatedClusterOptions options;
    options.replication_factor = 0;  // Statically sharded.
    options.shards = 4;
    options.durability = "buffered";
    auto cluster = ReplicatedCluster::Start(dir_.path(), options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  TempDir dir_;
  std::unique_ptr<ReplicatedCluster> cluster_;
};

TEST_F(ReplicatedClusterTest, NodesStartOnTheirAddressesAndEachLeadsTheShardsItOwns) {
  ASSERT_EQ(cluster_->size(), 3);
  EXPECT_EQ(cluster_->Endpoints(),
            absl::StrCat(cluster_->addresses()[0], ",", cluster_->addresses()[1], ",",
                         cluster_->addresses()[2]));
  auto leaders = cluster_->WaitForAllShardsLed(kWait);
  ASSERT_TRUE(leaders.ok()) << leaders.status();
  EXPECT_THAT(*leaders,
              ElementsAre(Leadership{0, 0}, Leadership{1, 0}, Leadership{2, 0}, Leadership{0, 0}));
  EXPECT_TRUE(cluster_->WaitForFullReplication(kWait).ok());
  EXPECT_EQ(ReplicatedCluster::BusiestLeader(*leaders), 0);
}

TEST_F(ReplicatedClusterTest, AKilledNodesShardsAreUnledUntilItComesBackOnItsAddress) {
  LeaderWatch watch(cluster_.get());
  EXPECT_EQ(cluster_->KillNode(1), ExitStatus::Signaled(SIGKILL));
  EXPECT_FALSE(cluster_->running(1));
  EXPECT_THAT(cluster_->Leaders(),
              ElementsAre(Leadership{0, 0}, Leadership{-1, 0}, Leadership{2, 0}, Leadership{0, 0}));
  absl::SleepFor(absl::Milliseconds(300));  // A gap the watch cannot miss.

  const absl::Status back = cluster_->StartNode(1);
  ASSERT_TRUE(back.ok()) << back;
  EXPECT_TRUE(cluster_->WaitForAllShardsLed(kWait).ok());
  watch.Stop();
  const LeaderlessTimes::Shard& shard1 = watch.times().shards()[1];
  EXPECT_EQ(shard1.gaps, 1);
  EXPECT_GE(shard1.total, absl::Milliseconds(300));
  EXPECT_EQ(watch.times().shards()[0].gaps, 0);
  EXPECT_THAT(watch.conflicts(), IsEmpty());
}

TEST_F(ReplicatedClusterTest, APausedNodeAnswersNothingUntilResumed) {
  cluster_->PauseNode(2);
  EXPECT_TRUE(cluster_->paused(2));
  EXPECT_TRUE(cluster_->running(2));
  EXPECT_EQ(cluster_->Leaders()[2], Leadership{});

  cluster_->ResumeNode(2);
  EXPECT_FALSE(cluster_->paused(2));
  EXPECT_TRUE(cluster_->WaitForAllShardsLed(kWait).ok());
}

TEST_F(ReplicatedClusterTest, AStoppedNodeExitsCleanlyAndRestartsOnAnEmptyDataDirectory) {
  // A paused node is resumed so that it can see SIGTERM.
  cluster_->PauseNode(0);
  auto stopped = cluster_->StopNode(0);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0));
  ASSERT_TRUE(std::filesystem::exists(cluster_->DataDir(0)));
  ASSERT_TRUE(cluster_->WipeNode(0).ok());
  EXPECT_FALSE(std::filesystem::exists(cluster_->DataDir(0)));

  const absl::Status back = cluster_->StartNode(0);
  ASSERT_TRUE(back.ok()) << back;
  EXPECT_TRUE(std::filesystem::exists(cluster_->DataDir(0)));
  EXPECT_FALSE(cluster_->WipeNode(0).ok()) << "a running node's data cannot be deleted";
  const absl::Status restarted = cluster_->RestartNode(1);
  EXPECT_TRUE(restarted.ok()) << restarted;
  EXPECT_TRUE(cluster_->WaitForAllShardsLed(kWait).ok());
}

TEST_F(ReplicatedClusterTest, TheFieldExperimentsCallsMakeAHistoryTheCheckerAccepts) {
  client::ClientOptions client_options;
  client_options.endpoint = cluster_->Endpoints();
  auto client = client::Client::Create(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  PipelineHistory history;
  examples::PipelineOptions options;
  options.run_id = "harness";
  options.on_guard_run = history.Hook();

  const examples::PipelineReport report = examples::RunPaymentPipeline(client->get(), options);
  EXPECT_EQ(report.charges, 2000);
  EXPECT_EQ(report.double_charged_keys, 0);
  EXPECT_EQ(report.errors, 0);
  EXPECT_EQ(history.runs(), report.deliveries);
  EXPECT_THAT(CheckHistory(history.Ops()), IsEmpty());
  const std::map<std::string, std::string> acknowledged = history.Acknowledged();
  ASSERT_EQ(acknowledged.size(), 2000u);
  for (const auto& [key, result] : acknowledged) {
    v1::QueryRequest query;
    query.set_namespace_(options.ns);
    query.set_key(key);
    auto read = (*client)->Query(query);
    ASSERT_TRUE(read.ok()) << key << ": " << read.status();
    ASSERT_EQ(read->record().state(), v1::STATE_COMPLETED) << key;
    ASSERT_EQ(read->record().result(), result) << key;
  }
}

TEST(ReplicatedClusterStartTest, ANodeThatRefusesItsFlagsFailsTheStartWithItsOutput) {
  TempDir dir;
  ReplicatedClusterOptions options;
  options.replication_factor = 0;
  options.extra_flags = {"--no_such_flag=1"};
  auto cluster = ReplicatedCluster::Start(dir.path(), options);
  ASSERT_FALSE(cluster.ok());
  EXPECT_THAT(cluster.status().message(), HasSubstr("exited with code 2 before serving"));
  EXPECT_THAT(cluster.status().message(), HasSubstr("unknown flag --no_such_flag"));
}

}  // namespace
}  // namespace dedup::blackbox
