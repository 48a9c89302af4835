// The client's connection to one node.
#include "client/src/node_connection.h"

#include <chrono>
#include <cstdio>

#include "absl/time/clock.h"
#include "client/src/completion_thread.h"
#include "dedup/client/client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/closing_port.h"
#include "tests/common/freezing_proxy.h"

namespace dedup::client {
namespace {

// One NodeConnection to `address` without coalescing, as the client
// library's defaults set it up but for `keepalive`, and its parts.
class Connection {
 public:
  Connection(const std::string& address, absl::Duration keepalive) {
    NodeConnection::Options options;
    options.coalesce = false;
    options.completions = completions_.queue();
    options.max_reconnect_backoff = ClientOptions().max_reconnect_backoff;
    options.keepalive_time = keepalive;
    options.keepalive_timeout = keepalive;
    connection_ = std::make_unique<NodeConnection>(address, options, &scheduler_, &live_);
  }
  ~Connection() {
    connection_.reset();
    live_.WaitForNone();
  }

  // A Query with `deadline` from now.
  grpc::Status Call(absl::Duration deadline) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    v1::QueryRequest request;
    request.set_namespace_("orders");
    request.set_key("o-1");
    v1::QueryResponse response;
    return connection_->stub()->Query(&context, request, &response);
  }

 private:
  CompletionThread completions_;
  Scheduler scheduler_{SystemClock::Default()};
  LiveCalls live_;
  std::unique_ptr<NodeConnection> connection_;
};

// A node that was down comes back, and the leaders hand its shards back to
// it: the calls for them must reach it within about a second, however long
// it was down. With gRPC's own reconnect back-off the client would wait
// 10.5 s (±20%) after six refused attempts, and up to two minutes after
// more, failing every call meanwhile.
TEST(NodeConnectionTest, ANodeBackAfterManyRefusedAttemptsIsReachedWithinTheLongestBackOff) {
  test::ClosingPort port;
  ASSERT_NE(port.port(), 0) << "no port to listen on";
  Connection connection(port.address(), ClientOptions().keepalive_time);
  // Calls while the node is down: each fails at once.
  auto call = [&] { return connection.Call(absl::Milliseconds(200)); };
  const absl::StatusOr<test::Reconnection> seen = test::RefuseThenServe(port, 6, call);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->last.error_code(), grpc::StatusCode::UNIMPLEMENTED) << seen->last.error_message();
  // The longest wait, jittered by up to 20%, and the connection itself.
  EXPECT_LE(seen->took, ClientOptions().max_reconnect_backoff * 1.2 + absl::Milliseconds(500))
      << "after " << seen->refused << " refused attempts";
}

// A connection that went silent (a partition that drops packets, a frozen
// host): the client's pings go unanswered, it closes the connection, and
// the call on it fails UNAVAILABLE, to be sent again, long before its
// deadline; the next call connects again and is answered. Without
// keepalive the call waits out its deadline. Short keepalive times, which
// the test's server allows: the defaults take 25 s.
TEST(NodeConnectionTest, AConnectionThatWentSilentIsClosedByItsPingsAndConnectedAgain) {
  v1::Dedup::Service service;  // Every method answers UNIMPLEMENTED.
  grpc::ServerBuilder builder;
  int server_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &server_port);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 100);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  test::FreezingProxy proxy(server_port);
  ASSERT_NE(proxy.port(), 0) << "no port to listen on";

  auto connection = std::make_unique<Connection>(proxy.address(), absl::Milliseconds(500));
  auto call = [&](absl::Duration deadline) { return connection->Call(deadline); };
  ASSERT_EQ(call(absl::Seconds(5)).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  ASSERT_EQ(proxy.connections(), 1);

  proxy.Freeze();
  const absl::Time frozen = absl::Now();
  const grpc::Status on_silent = call(absl::Seconds(20));
  const absl::Duration took = absl::Now() - frozen;
  // Not DEADLINE_EXCEEDED: the connection was closed under the call.
  EXPECT_EQ(on_silent.error_code(), grpc::StatusCode::UNAVAILABLE) << on_silent.error_message();
  std::printf("[ measured ] the call on the silent connection failed after %s\n",
              absl::FormatDuration(took).c_str());
  // The channel connects again, after its back-off; meanwhile calls fail
  // at once, as the client library's retries expect.
  grpc::Status again = call(absl::Seconds(1));
  for (const absl::Time give_up = absl::Now() + absl::Seconds(30);
       again.error_code() == grpc::StatusCode::UNAVAILABLE && absl::Now() < give_up;) {
    absl::SleepFor(absl::Milliseconds(5));
    again = call(absl::Seconds(1));
  }
  EXPECT_EQ(again.error_code(), grpc::StatusCode::UNIMPLEMENTED) << again.error_message();
  EXPECT_EQ(proxy.connections(), 2) << "a new connection";
  connection.reset();
  // Not waiting for the silent connection's goodbye (gRPC's 20 s).
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace dedup::client
