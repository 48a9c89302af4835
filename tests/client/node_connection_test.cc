// The client's connection to one node.
#include "client/src/node_connection.h"

#include "absl/time/clock.h"
#include "client/src/completion_thread.h"
#include "dedup/client/client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/closing_port.h"

namespace dedup::client {
namespace {

// A node that was down comes back, and the leaders hand its shards back to
// it: the calls for them must reach it within about a second, however long
// it was down. With gRPC's own reconnect back-off the client would wait
// 10.5 s (±20%) after six refused attempts, and up to two minutes after
// more, failing every call meanwhile.
TEST(NodeConnectionTest, ANodeBackAfterManyRefusedAttemptsIsReachedWithinTheLongestBackOff) {
  test::ClosingPort port;
  ASSERT_NE(port.port(), 0) << "no port to listen on";
  CompletionThread completions;
  Scheduler scheduler(SystemClock::Default());
  LiveCalls live;
  NodeConnection::Options options;
  options.coalesce = false;
  options.completions = completions.queue();
  options.max_reconnect_backoff = ClientOptions().max_reconnect_backoff;
  auto connection = std::make_unique<NodeConnection>(port.address(), options, &scheduler, &live);

  // Calls while the node is down: each fails at once.
  auto call = [&]() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
    v1::QueryRequest request;
    request.set_namespace_("orders");
    request.set_key("o-1");
    v1::QueryResponse response;
    return connection->stub()->Query(&context, request, &response);
  };
  const absl::StatusOr<test::Reconnection> seen = test::RefuseThenServe(port, 6, call);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->last.error_code(), grpc::StatusCode::UNIMPLEMENTED) << seen->last.error_message();
  // The longest wait, jittered by up to 20%, and the connection itself.
  EXPECT_LE(seen->took, ClientOptions().max_reconnect_backoff * 1.2 + absl::Milliseconds(500))
      << "after " << seen->refused << " refused attempts";
  connection.reset();
  live.WaitForNone();
}

}  // namespace
}  // namespace dedup::client
