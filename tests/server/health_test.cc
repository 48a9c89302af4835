// The standard gRPC health service answers for the server and for the
// Dedup service, so load balancers and orchestrators can probe it (design.md §6).

#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/health_service.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::ElementsAre;

// A Watch call whose statuses a thread collects until the call ends.
class WatchCall {
 public:
  WatchCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& service)
      : health_(Health::NewStub(channel)), context_(NewContext()) {
    HealthCheckRequest request;
    request.set_service(service);
    reader_ = health_->Watch(context_.get(), request);
    thread_ = std::thread([this] {
      HealthCheckResponse response;
      while (reader_->Read(&response)) {
        absl::MutexLock lock(&mu_);
        seen_.push_back(response.status());
      }
    });
  }

  // A test that stopped early cancels the call so the thread ends.
  ~WatchCall() {
    if (!thread_.joinable()) return;
    context_->TryCancel();
    thread_.join();
  }

  // Waits until `n` statuses have arrived, or 10 s; returns whether they did.
  bool AwaitStatuses(size_t n) {
    absl::MutexLock lock(&mu_);
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return seen_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(10));
  }

  // Waits for the call to end and returns how it ended.
  grpc::Status End() {
    thread_.join();
    return reader_->Finish();
  }

  std::vector<HealthCheckResponse::ServingStatus> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  std::unique_ptr<Health::Stub> health_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader_;
  absl::Mutex mu_;
  std::vector<HealthCheckResponse::ServingStatus> seen_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // Last: starts once the rest is built.
};

class HealthTest : public ServerTest {
 protected:
  grpc::Status Check(const std::string& service, HealthCheckResponse* response) {
    std::unique_ptr<Health::Stub> health = Health::NewStub(server_->channel());
    HealthCheckRequest request;
    request.set_service(service);
    std::unique_ptr<grpc::ClientContext> context = NewContext();
    return health->Check(context.get(), request, response);
  }
};

TEST_F(HealthTest, ServerAsAWholeIsServing) {
  HealthCheckResponse response;

  ASSERT_THAT(Check("", &response), IsOk());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
}

TEST_F(HealthTest, DedupServiceIsServing) {
  HealthCheckResponse response;

  ASSERT_THAT(Check("dedup.v1.Dedup", &response), IsOk());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
}

// A load balancer's health check Watches for as long as the server lives.
// Shutting down, the server tells it NOT_SERVING and ends the call, rather
// than waiting out its grace for a call that never ends on its own.
TEST_F(HealthTest, ShutdownTellsAWatcherNotServingAndEndsTheWatch) {
  WatchCall watch(server_->channel(), "");
  ASSERT_TRUE(watch.AwaitStatuses(1));

  server_->server().Shutdown(absl::Seconds(20));

  EXPECT_THAT(watch.End(), IsErrorNaming(grpc::StatusCode::UNAVAILABLE, "dedupd is shutting down"));
  EXPECT_THAT(watch.seen(),
              ElementsAre(HealthCheckResponse::SERVING, HealthCheckResponse::NOT_SERVING));
}

// What Watch reports as the server's statuses change: the status now, a
// service not known yet as SERVICE_UNKNOWN, then each change, and nothing
// for a status set again unchanged.
TEST(HealthServiceTest, AWatchSeesTheStatusNowThenEachChange) {
  HealthService health;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());

  WatchCall service(channel, "dedup.v1.Dedup");
  WatchCall whole(channel, "");
  ASSERT_TRUE(service.AwaitStatuses(1));
  ASSERT_TRUE(whole.AwaitStatuses(1));
  health.SetServingStatus("dedup.v1.Dedup", true);
  ASSERT_TRUE(service.AwaitStatuses(2));
  health.SetServingStatus("dedup.v1.Dedup", true);
  health.SetServingStatus(false);
  ASSERT_TRUE(service.AwaitStatuses(3));
  ASSERT_TRUE(whole.AwaitStatuses(2));
  health.Shutdown();

  EXPECT_THAT(service.End(), IsErrorNaming(grpc::StatusCode::UNAVAILABLE, "dedupd"));
  EXPECT_THAT(whole.End(), IsErrorNaming(grpc::StatusCode::UNAVAILABLE, "dedupd"));
  EXPECT_THAT(service.seen(),
              ElementsAre(HealthCheckResponse::SERVICE_UNKNOWN, HealthCheckResponse::SERVING,
                          HealthCheckResponse::NOT_SERVING));
  EXPECT_THAT(whole.seen(),
              ElementsAre(HealthCheckResponse::SERVING, HealthCheckResponse::NOT_SERVING));
  server->Shutdown(std::chrono::system_clock::now());
}

TEST_F(HealthTest, UnknownServiceIsNotFound) {
  HealthCheckResponse response;

  EXPECT_EQ(Check("no.such.Service", &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace dedup::server::test
