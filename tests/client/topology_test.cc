// Which node the client sends each key to.
#include "client/src/topology.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/src/completion_thread.h"
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
  void TearDown() override {
    // As the client does: fetches stop while the scheduler still runs, and
    // the scheduler stops before the topology closes its connections.
    if (topology_ != nullptr) topology_->StopFetching();
    scheduler_.reset();
    if (topology_ != nullptr) topology_->Close();
    // The channels go with the topology; their last users must be gone first.
    live_.WaitForNone();
    topology_.reset();
  }

  Topology* NewTopology(std::vector<std::string> seeds) {
    NodeConnection::Options options;
    options.coalesce = false;
    options.completions = completions_.queue();
    topology_ = std::make_unique<Topology>(std::move(seeds), options, scheduler_.get(), &live_);
    return topology_.get();
  }
  Topology* NewTopology(const std::string& seed) {
    return NewTopology(std::vector<std::string>{seed});
  }

  LiveCalls live_;
  std::unique_ptr<Scheduler> scheduler_ = std::make_unique<Scheduler>(SystemClock::Default());
  CompletionThread completions_;  // Outlives the topology's calls.
  std::unique_ptr<Topology> topology_;
};

// A TCP port that takes connections and never says a word: a node whose
// host froze, or a network that drops its packets.
class SilentPort {
 public:
  SilentPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(fd_, 64) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return;
    }
    address_ = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  }
  ~SilentPort() {
    if (fd_ >= 0) close(fd_);
  }
  // Empty if the port could not be opened.
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

TEST_F(TopologyTest, RoutesEveryKeyToTheNodeTheServerHoldsForItsOwner) {
  v1::TopologyResponse map;
  map.set_shard_count(16);
  // Never dialled: routing only picks a node.
  for (int port : {1, 2, 3}) map.add_nodes(absl::StrCat("127.0.0.1:", port));
  const std::vector<std::string> nodes(map.nodes().begin(), map.nodes().end());
  ScriptedDedup seed(0, map);
  ASSERT_FALSE(seed.address().empty());
  Topology* topology = NewTopology(seed.address());
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
}

TEST_F(TopologyTest, FirstSeedOwnsEveryKeyUntilANodeAnswers) {
  Topology* topology = NewTopology("127.0.0.1:1");
  EXPECT_EQ(topology->Route(ClaimOp("a"))->address(), "127.0.0.1:1");
  EXPECT_EQ(topology->Route(ClaimOp("b"))->address(), "127.0.0.1:1");
}

TEST_F(TopologyTest, SingleNodeMapRoutesEveryKeyToTheNodeThatAnswered) {
  ScriptedDedup node(0);  // Answers a map without nodes: a single node.
  ASSERT_FALSE(node.address().empty());
  Topology* topology = NewTopology(node.address());
  topology->Refresh();
  EXPECT_EQ(topology->Route(ClaimOp("a"))->address(), node.address());
  EXPECT_EQ(topology->Owners().size(), 1u);
}

TEST_F(TopologyTest, RefreshIsNotHeldUpByANodeThatDoesNotAnswer) {
  SilentPort silent;
  ASSERT_FALSE(silent.address().empty());
  ScriptedDedup live(0);
  ASSERT_FALSE(live.address().empty());
  // The silent node is asked first, and would take kTopologyTimeout.
  Topology* topology = NewTopology({silent.address(), live.address()});
  const absl::Time start = absl::Now();
  topology->Refresh();
  EXPECT_LT(absl::Now() - start, Topology::kTopologyTimeout / 2);
  EXPECT_EQ(topology->Route(ClaimOp("a"))->address(), live.address());
}

TEST_F(TopologyTest, GenerationChangesOnlyWhenSomeKeysNodeChanges) {
  v1::TopologyResponse map;
  map.set_shard_count(16);
  for (int port : {1, 2, 3}) map.add_nodes(absl::StrCat("127.0.0.1:", port));
  ScriptedDedup seed(0, map);
  ASSERT_FALSE(seed.address().empty());
  Topology* topology = NewTopology(seed.address());
  const uint64_t before = topology->generation();
  uint64_t routed = 0;
  topology->Refresh();
  topology->Route(ClaimOp("a"), &routed);
  EXPECT_NE(routed, before);
  topology->Refresh();  // The same map again.
  EXPECT_EQ(topology->generation(), routed);
}

TEST_F(TopologyTest, RefreshThenRunsOnceTheFetchHasEnded) {
  v1::TopologyResponse map;
  map.set_shard_count(16);
  for (int port : {1, 2, 3}) map.add_nodes(absl::StrCat("127.0.0.1:", port));
  ScriptedDedup seed(0, map);
  ASSERT_FALSE(seed.address().empty());
  Topology* topology = NewTopology(seed.address());
  absl::Notification first, second;
  topology->RefreshThen([&] { first.Notify(); });
  topology->RefreshThen([&] { second.Notify(); });  // Joins the first.
  ASSERT_TRUE(first.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(second.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(topology->Owners().size(), 3u);
}

}  // namespace
}  // namespace dedup::client
