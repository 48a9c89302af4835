// A node reaches a peer, or an etcd member, again within about a second
// of its coming back, however long it was down (server/cluster/
// cluster_channel.h). With gRPC's own reconnect back-off the wait after
// six refused attempts is 10.5 s (1, 1.6, 2.56, 4.1, 6.55, then 10.5 s,
// each ±20%), and grows to two minutes.

#include "server/cluster/cluster_channel.h"

#include <thread>

#include "absl/time/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/common/closing_port.h"

namespace dedup::server::cluster {
namespace {

TEST(ClusterChannelTest, APeerBackAfterManyRefusedAttemptsIsReachedWithinTheLongestBackOff) {
  test::ClosingPort port;
  ASSERT_NE(port.port(), 0) << "no port to listen on";
  // gRPC runs its timers, the reconnect back-off's among them, on threads
  // that wait on a completion queue, as a node's server threads do; with
  // none, only its backup poller would, every 5 s.
  grpc::CompletionQueue queue;
  std::thread poller([&queue] {
    void* tag;
    bool ok;
    while (queue.Next(&tag, &ok)) {
    }
  });
  v1::Dedup::Stub stub(ClusterChannel(port.address(), grpc::InsecureChannelCredentials()));
  // A call to the peer, as a leader's shipping loop makes one each round;
  // each fails at once while the peer is down.
  auto call = [&stub]() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
    v1::QueryRequest request;
    v1::QueryResponse response;
    return stub.Query(&context, request, &response);
  };
  const absl::StatusOr<test::Reconnection> seen = test::RefuseThenServe(port, 6, call);
  queue.Shutdown();
  poller.join();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->last.error_code(), grpc::StatusCode::UNIMPLEMENTED) << seen->last.error_message();
  // The longest wait, jittered by up to 20%, and the connection itself.
  EXPECT_LE(seen->took, kMaxReconnectBackoff * 1.2 + absl::Milliseconds(500))
      << "after " << seen->refused << " refused attempts";
}

}  // namespace
}  // namespace dedup::server::cluster
