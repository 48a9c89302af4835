// Which node the client sends each key to.
#include "client/src/topology.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/shard_map.h"
#include "tests/client/scripted_dedup.h"

namespace dedup::client {
namespace {

using test::ScriptedDedup;

v1::Operation ClaimOp(const std::string& key) {
  v1::Operation op;
  op.mutable_claim()->set_namespace_("orders");
  op.mutable_claim()->set_key(key);
  return op;
}

// A Topology with the scheduler and call count it needs.
class TopologyTest : public ::testing::Test {
 protected:
  ~TopologyTest() override { live_.WaitForNone(); }

  std::unique_ptr<Topology> NewTopology(const std::string& seed) {
    NodeConnection::Options options;
    options.coalesce = false;
    return std::make_unique<Topology>(std::vector<std::string>{seed}, options, &scheduler_, &live_);
  }

  LiveCalls live_;
  Scheduler scheduler_{SystemClock::Default()};
};

TEST_F(TopologyTest, RoutesEveryKeyToTheNodeTheServerHoldsForItsOwner) {
  v1::TopologyResponse map;
  map.set_shard_count(16);
  // Never dialled: routing only picks a node.
  for (int port : {1, 2, 3}) map.add_nodes(absl::StrCat("127.0.0.1:", port));
  const std::vector<std::string> nodes(map.nodes().begin(), map.nodes().end());
  ScriptedDedup seed(0, map);
  ASSERT_FALSE(seed.address().empty());
  auto topology = NewTopology(seed.address());
  topology->Refresh();

  std::set<std::string> used;
  for (int i = 0; i < 300; ++i) {
    const std::string key = absl::StrCat("order-", i);
    const std::string& address = topology->Route(ClaimOp(key))->address();
    used.insert(address);
    const auto index = std::find(nodes.begin(), nodes.end(), address) - nodes.begin();
    ASSERT_LT(index, static_cast<long>(nodes.size())) << address << " is not in the map";
    const server::ShardMap server_view(16, nodes, static_cast<uint32_t>(index));
    EXPECT_TRUE(server_view.CheckOwned("orders", key).ok()) << key << " went to " << address;
  }
  EXPECT_EQ(used.size(), nodes.size()) << "every node owns some of 300 keys";
  topology->Close();
}

TEST_F(TopologyTest, FirstSeedOwnsEveryKeyUntilANodeAnswers) {
  auto topology = NewTopology("127.0.0.1:1");
  EXPECT_EQ(topology->Route(ClaimOp("a"))->address(), "127.0.0.1:1");
  EXPECT_EQ(topology->Route(ClaimOp("b"))->address(), "127.0.0.1:1");
  topology->Close();
}

TEST_F(TopologyTest, SingleNodeMapRoutesEveryKeyToTheNodeThatAnswered) {
  ScriptedDedup node(0);  // Answers a map without nodes: a single node.
  ASSERT_FALSE(node.address().empty());
  auto topology = NewTopology(node.address());
  topology->Refresh();
  EXPECT_EQ(topology->Route(ClaimOp("a"))->address(), node.address());
  EXPECT_EQ(topology->Owners().size(), 1u);
  topology->Close();
}

}  // namespace
}  // namespace dedup::client
