// The client in a replicated cluster: every key goes to its shard's leader,
// and leadership moving (a failover, a leader that is down, a shard waiting
// for an election) shows to callers only as latency. Against a
// FakeReplicatedCluster, with and without coalescing onto Stream batches.
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "dedup/client/client.h"
#include "gtest/gtest.h"
#include "storage/key_codec.h"
#include "tests/client/fake_replicated_cluster.h"

namespace dedup::client {
namespace {

using test::FakeReplicatedCluster;

constexpr int kNodes = 3;
constexpr uint32_t kShards = 8;
// Time enough for every failover a test plays, and much longer than any.
constexpr absl::Duration kDeadline = absl::Seconds(10);

v1::ClaimRequest ClaimOf(const std::string& key) {
  v1::ClaimRequest r;
  r.set_namespace_("orders");
  r.set_key(key);
  r.set_owner("worker-a");
  return r;
}

// Long enough for a few attempts of 200 ms, short enough that a call
// waiting it out keeps the test short.
CallOptions ShortDeadline() {
  CallOptions options;
  options.deadline = absl::Now() + absl::Seconds(2);
  return options;
}

CallOptions WithDeadline() {
  CallOptions options;
  options.deadline = absl::Now() + kDeadline;
  return options;
}

class LeaderRoutingTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.ok()); }

  // A client given only node `seed` of the cluster.
  std::unique_ptr<Client> NewClient(int seed = 0) {
    ClientOptions options;
    options.endpoint = cluster_.addresses()[seed];
    options.coalesce = GetParam();
    auto client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // A client given every node, whose attempts last `attempt_timeout`.
  std::unique_ptr<Client> NewClientOfEveryNode(absl::Duration attempt_timeout) {
    ClientOptions options;
    options.endpoint = absl::StrJoin(cluster_.addresses(), ",");
    options.coalesce = GetParam();
    options.attempt_timeout = attempt_timeout;
    auto client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Claims `count` keys named after `prefix` at once and expects each to be
  // ACQUIRED before its deadline.
  void ExpectEveryClaimAcquired(Client& client, const std::string& prefix, int count) {
    std::vector<std::future<absl::StatusOr<v1::ClaimResponse>>> calls;
    for (int i = 0; i < count; ++i) {
      calls.push_back(client.ClaimFuture(ClaimOf(absl::StrCat(prefix, i)), WithDeadline()));
    }
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<v1::ClaimResponse> claimed = calls[i].get();
      ASSERT_TRUE(claimed.ok()) << prefix << i << ": " << claimed.status();
      EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED) << prefix << i;
    }
  }

  FakeReplicatedCluster cluster_{kNodes, kShards};
};

TEST_P(LeaderRoutingTest, CallsGoStraightToTheLeaderOfTheirShard) {
  // No shard is led by its static owner (shard s mod 3).
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    cluster_.SetLeader(shard, static_cast<int>((storage::NodeOfShard(shard, kNodes) + 1) % kNodes));
  }
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  std::vector<int> expected(kNodes, 0);
  for (int i = 0; i < 40; ++i) {
    const std::string key = absl::StrCat("k", i);
    ++expected[(storage::NodeOfShard(cluster_.ShardOf(key), kNodes) + 1) % kNodes];
    auto claimed = client->Claim(ClaimOf(key), WithDeadline());
    ASSERT_TRUE(claimed.ok()) << key << ": " << claimed.status();
  }
  EXPECT_EQ(cluster_.refused_total(), 0) << "some call went to a node that does not lead its shard";
  for (int node = 0; node < kNodes; ++node) {
    EXPECT_EQ(cluster_.served(node), expected[node]) << "node " << node;
  }
}

TEST_P(LeaderRoutingTest, AfterLeadershipMovesCallsSucceedWithinTheirDeadline) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  ExpectEveryClaimAcquired(*client, "before-", 20);
  ASSERT_EQ(cluster_.served(0), 20);

  cluster_.SetEveryLeader(1);  // The client still holds the old map.
  ExpectEveryClaimAcquired(*client, "after-", 20);
  EXPECT_EQ(cluster_.served(1), 20);
  EXPECT_GT(cluster_.refused(0), 0) << "the client should have found out from node 0";
}

// Leadership of the key's shard moves on each time the call reaches the
// leader it was told of, five times over: more than any fixed count of
// re-sends would cover.
TEST_P(LeaderRoutingTest, LeadershipMovingSeveralTimesDuringOneCallIsFollowed) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  cluster_.MoveLeadershipOnArrival(5);
  auto claimed = client->Claim(ClaimOf("moving"), WithDeadline());
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(cluster_.refused_total(), 5);
}

TEST_P(LeaderRoutingTest, ShardWithoutALeaderIsRetriedUntilOneIsElected) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const uint32_t shard = cluster_.ShardOf("electing");
  cluster_.SetLeader(shard, -1);
  auto call = client->ClaimFuture(ClaimOf("electing"), WithDeadline());
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(call.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "answered while the shard had no leader";
  cluster_.SetLeader(shard, 2);
  absl::StatusOr<v1::ClaimResponse> claimed = call.get();
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(cluster_.served(2), 1);
  EXPECT_GT(cluster_.unavailable(0), 0);
}

TEST_P(LeaderRoutingTest, LeaderThatIsDownIsRoutedAroundOnceTopologyNamesANewLeader) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  ExpectEveryClaimAcquired(*client, "before-", 10);

  cluster_.Stop(0);  // Node 0 led every shard, and was the client's seed.
  std::vector<std::future<absl::StatusOr<v1::ClaimResponse>>> calls;
  for (int i = 0; i < 10; ++i) {
    calls.push_back(client->ClaimFuture(ClaimOf(absl::StrCat("after-", i)), WithDeadline()));
  }
  // The election: until it ends, the map still names node 0.
  absl::SleepFor(absl::Milliseconds(500));
  cluster_.SetEveryLeader(2);
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<v1::ClaimResponse> claimed = calls[i].get();
    ASSERT_TRUE(claimed.ok()) << "after-" << i << ": " << claimed.status();
  }
  EXPECT_EQ(cluster_.served(2), 10);
  EXPECT_EQ(cluster_.refused_total(), 0) << "calls went to a live node that does not lead";
}

// Every shard's leader hangs: it takes calls and answers none, as a paused
// process or a cut network does, while another node is elected. Each call
// must give up on the hung node after its attempt timeout and find the new
// leader within its deadline, not wait the deadline out.
TEST_P(LeaderRoutingTest, ALeaderThatHangsIsLeftForItsSuccessorWithinTheCallsDeadline) {
  auto client = NewClientOfEveryNode(absl::Milliseconds(200));
  ASSERT_NE(client, nullptr);
  ExpectEveryClaimAcquired(*client, "before-", 10);
  ASSERT_EQ(cluster_.served(0), 10);

  cluster_.Hang(0);
  cluster_.SetEveryLeader(1);  // The client still holds the old map.
  std::vector<std::future<absl::StatusOr<v1::ClaimResponse>>> calls;
  for (int i = 0; i < 10; ++i) {
    calls.push_back(client->ClaimFuture(ClaimOf(absl::StrCat("after-", i)), ShortDeadline()));
  }
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<v1::ClaimResponse> claimed = calls[i].get();
    ASSERT_TRUE(claimed.ok()) << "after-" << i << ": " << claimed.status();
    EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
  }
  EXPECT_EQ(cluster_.served(1), 10);
}

// Without an attempt timeout a call stays with the node it was sent to:
// a hung one makes it wait out its deadline.
TEST_P(LeaderRoutingTest, WithoutAnAttemptTimeoutACallWaitsOutItsDeadlineOnAHungLeader) {
  auto client = NewClientOfEveryNode(absl::ZeroDuration());
  ASSERT_NE(client, nullptr);
  ExpectEveryClaimAcquired(*client, "before-", 1);
  cluster_.Hang(0);
  cluster_.SetEveryLeader(1);
  absl::StatusOr<v1::ClaimResponse> claimed = client->Claim(ClaimOf("after"), ShortDeadline());
  EXPECT_TRUE(absl::IsDeadlineExceeded(claimed.status())) << claimed.status();
  EXPECT_EQ(cluster_.served(1), 0);
}

INSTANTIATE_TEST_SUITE_P(CoalescedAndUnary, LeaderRoutingTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Coalesced" : "Unary"; });

}  // namespace
}  // namespace dedup::client
