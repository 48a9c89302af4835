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

constexpr int kRefusedAttempts = 6;

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
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (port.attempts() < kRefusedAttempts && absl::Now() < give_up) {
    call();
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(port.attempts(), kRefusedAttempts) << "the channel stopped trying to connect";

  // The peer is back.
  port.Release();
  v1::Dedup::Service service;  // Answers UNIMPLEMENTED: being reached is enough.
  grpc::ServerBuilder builder;
  builder.AddListeningPort(port.address(), grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr) << "could not listen on " << port.address() << " again";
  const absl::Time back = absl::Now();
  grpc::Status status = call();
  while (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
         absl::Now() - back < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(5));
    status = call();
  }
  const absl::Duration took = absl::Now() - back;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  // The longest wait, jittered by up to 20%, and the connection itself.
  EXPECT_LE(took, kMaxReconnectBackoff * 1.2 + absl::Milliseconds(500))
      << "after " << port.attempts() << " refused attempts";
  server->Shutdown();
  queue.Shutdown();
  poller.join();
}

}  // namespace
}  // namespace dedup::server::cluster
