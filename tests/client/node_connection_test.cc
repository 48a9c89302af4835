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
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (port.attempts() < 6 && absl::Now() < give_up) {
    call();
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(port.attempts(), 6) << "the connection stopped trying to connect";

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
  EXPECT_LE(took, ClientOptions().max_reconnect_backoff * 1.2 + absl::Milliseconds(500))
      << "after " << port.attempts() << " refused attempts";
  connection.reset();
  live.WaitForNone();
  server->Shutdown();
}

}  // namespace
}  // namespace dedup::client
