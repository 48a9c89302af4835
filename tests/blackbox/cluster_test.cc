// A three-node cluster of dedupd binaries on 127.0.0.1: every key has one
// owner, clients reach it directly, and a node that is down fails closed.
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/examples/payment_pipeline.h"
#include "dedup/client/client.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {

using ::dedup::test::TempDir;
namespace {

constexpr int kNodes = 3;
constexpr uint32_t kShards = 16;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int port : FreePorts(kNodes)) addresses_.push_back(absl::StrCat("127.0.0.1:", port));
    for (int i = 0; i < kNodes; ++i) StartNode(i);
    client::ClientOptions options;
    options.endpoint = addresses_[0];  // One seed is enough: the rest comes from Topology.
    options.default_timeout = absl::Seconds(5);
    auto client = client::Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  void StartNode(int i) {
    auto node = ServingDedupd::Start(
        dir_.path(), dir_.Sub(absl::StrCat("node-", i)),
        {"--listen=" + addresses_[i], "--cluster_nodes=" + absl::StrJoin(addresses_, ","),
         absl::StrCat("--node_index=", i), absl::StrCat("--shards=", kShards)});
    ASSERT_TRUE(node.ok()) << node.status();
    nodes_[i] = std::move(*node);
  }

  int OwnerOf(const std::string& ns, const std::string& key) const {
    return static_cast<int>(storage::ShardOf(ns, key, kShards) % kNodes);
  }

  absl::StatusOr<v1::ClaimResponse> Claim(const std::string& key, const std::string& owner,
                                          absl::Duration timeout = absl::Seconds(5)) {
    v1::ClaimRequest request;
    request.set_namespace_("orders");
    request.set_key(key);
    request.set_owner(owner);
    client::CallOptions options;
    options.deadline = absl::Now() + timeout;
    return client_->Claim(request, options);
  }

  TempDir dir_;
  std::vector<std::string> addresses_;
  std::array<std::unique_ptr<ServingDedupd>, kNodes> nodes_;
  std::unique_ptr<client::Client> client_;
};

TEST_F(ClusterTest, EveryNodeServesTheSameTopology) {
  for (int i = 0; i < kNodes; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::TopologyResponse topology;
    auto stub = v1::Dedup::NewStub(nodes_[i]->channel());
    ASSERT_TRUE(stub->Topology(&context, v1::TopologyRequest(), &topology).ok());
    EXPECT_EQ(topology.shard_count(), kShards);
    EXPECT_EQ(std::vector<std::string>(topology.nodes().begin(), topology.nodes().end()),
              addresses_);
    EXPECT_EQ(topology.node_index(), static_cast<uint32_t>(i));
  }
}

TEST_F(ClusterTest, KeysSpreadOverEveryNodeAndLiveOnlyOnTheirOwner) {
  std::array<int, kNodes> per_node{};
  for (int k = 0; k < 900; ++k) {
    const std::string key = absl::StrCat("order-", k);
    auto claimed = Claim(key, "worker-a");
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    ASSERT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
    ++per_node[OwnerOf("orders", key)];
  }
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_GT(per_node[i], 900 / kNodes / 2) << "node " << i << " owns too few keys";
    v1::ScanRequest scan;
    scan.set_namespace_("orders");
    grpc::ClientContext context;
    auto stub = v1::Dedup::NewStub(nodes_[i]->channel());
    auto reader = stub->Scan(&context, scan);
    int stored = 0;
    for (v1::Record record; reader->Read(&record);) {
      ++stored;
      EXPECT_EQ(OwnerOf("orders", record.key()), i) << record.key() << " is stored on node " << i;
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(stored, per_node[i]) << "node " << i;
  }
}

TEST_F(ClusterTest, FieldExperimentChargesEveryPaymentOnceThroughTheCluster) {
  examples::PipelineOptions options;
  options.run_id = "cluster";
  options.ns = "payment-callback";
  examples::PipelineReport report = examples::RunPaymentPipeline(client_.get(), options);
  EXPECT_EQ(report.charges, 2000);
  EXPECT_EQ(report.double_charged_keys, 0);
  EXPECT_EQ(report.errors, 0);
}

TEST_F(ClusterTest, StoppedNodeFailsOnlyItsOwnKeysAndReturnsWithItsRecords) {
  // A key of each node, completed before node 1 stops.
  std::array<std::string, kNodes> keys;
  for (int k = 0, found = 0; found < kNodes; ++k) {
    const std::string key = absl::StrCat("key-", k);
    if (keys[OwnerOf("orders", key)].empty()) {
      keys[OwnerOf("orders", key)] = key;
      ++found;
    }
  }
  for (const std::string& key : keys) {
    auto claimed = Claim(key, "worker-a");
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    v1::CompleteRequest complete;
    complete.set_namespace_("orders");
    complete.set_key(key);
    complete.set_token(claimed->token());
    complete.set_result("receipt of " + key);
    ASSERT_TRUE(client_->Complete(complete).ok());
  }

  auto stopped = nodes_[1]->process().Terminate(std::chrono::seconds(20));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  nodes_[1].reset();

  auto lost = Claim(keys[1], "worker-b", absl::Milliseconds(800));
  ASSERT_FALSE(lost.ok()) << "node 1 is down; nothing may answer for its keys";
  EXPECT_TRUE(absl::IsUnavailable(lost.status()) || absl::IsDeadlineExceeded(lost.status()))
      << lost.status();
  for (int i : {0, 2}) {
    auto other = Claim(keys[i], "worker-b");
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_EQ(other->outcome(), v1::ClaimResponse::COMPLETED);
  }
  // No second copy: the surviving nodes refuse node 1's key.
  grpc::ClientContext context;
  v1::ClaimResponse refused;
  v1::ClaimRequest request;
  request.set_namespace_("orders");
  request.set_key(keys[1]);
  request.set_owner("worker-b");
  auto stub0 = v1::Dedup::NewStub(nodes_[0]->channel());
  EXPECT_EQ(stub0->Claim(&context, request, &refused).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  StartNode(1);
  client::CallOptions options;
  options.deadline = absl::Now() + absl::Seconds(15);  // Reconnecting to node 1 may back off.
  v1::ClaimRequest again = request;
  auto back = client_->Claim(again, options);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(back->result(), "receipt of " + keys[1]);
}

}  // namespace
}  // namespace dedup::blackbox
