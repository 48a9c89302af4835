// The standard gRPC health service answers for the server and for the
// Dedup service, so load balancers and orchestrators can probe it (design.md §6).

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

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

TEST_F(HealthTest, UnknownServiceIsNotFound) {
  HealthCheckResponse response;

  EXPECT_EQ(Check("no.such.Service", &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace dedup::server::test
