// The replication service refuses every caller without the replica role,
// on Ship and on every message of a ShipStream alike, so that no client
// can forge log entries (server/cluster/replication_service.h). A refused
// call reaches neither the replicator nor the store.

#include "server/cluster/replication_service.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"

namespace dedup::server::cluster {
namespace {

namespace rv1 = ::dedup::replication::v1;

constexpr char kClientToken[] = "tok-client-5c1d0e7a92b84f31";
constexpr char kReplicaToken[] = "tok-replica-8e2f4b6d1a9c7035";
constexpr char kPeerToken[] = "tok-peer-3f7a9c2e5b1d8046";

class ReplicationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/replication-service-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    const std::string tokens = dir_ + "/tokens";
    std::ofstream(tokens) << "spiffe://test/client sha256:" << Sha256Hex(kClientToken) << "\n"
                          << "spiffe://test/replica sha256:" << Sha256Hex(kReplicaToken) << "\n"
                          << "spiffe://test/peer sha256:" << Sha256Hex(kPeerToken) << "\n";
    AuthSettings settings;
    settings.tokens_file = tokens;
    Grant client;
    client.identity = "spiffe://test/client";
    client.namespaces = {"*"};
    client.claim = client.read = client.scan = client.cluster = true;
    settings.grants.push_back(client);
    Grant peer;
    peer.identity = "spiffe://test/peer";
    peer.namespaces = {"*"};
    peer.replica = true;
    settings.grants.push_back(peer);
    absl::StatusOr<std::unique_ptr<Authorizer>> auth = Authorizer::Create(settings);
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = std::move(*auth);
    // No replicator, store or pool: a refused call must touch none, nor
    // must a peer's stream that sends nothing.
    service_ = std::make_unique<ReplicationService>(nullptr, auth_.get(), nullptr, nullptr);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    stub_ = rv1::Replication::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now()));
    std::remove((dir_ + "/tokens").c_str());
    rmdir(dir_.c_str());
  }

  static std::unique_ptr<grpc::ClientContext> As(const char* token) {
    auto context = std::make_unique<grpc::ClientContext>();
    if (token != nullptr) context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return context;
  }

  static rv1::ShipRequest Forged() {
    rv1::ShipRequest request;
    rv1::AppendRequest* append = request.add_appends();
    append->set_shard(3);
    append->set_epoch(1'000'000);
    return request;
  }

  grpc::StatusCode ShipCall(const char* token) {
    rv1::ShipResponse response;
    return stub_->Ship(As(token).get(), Forged(), &response).error_code();
  }

  grpc::StatusCode ShipOnStream(const char* token) {
    std::unique_ptr<grpc::ClientContext> context = As(token);
    auto stream = stub_->ShipStream(context.get());
    stream->Write(Forged());
    rv1::ShipResponse response;
    EXPECT_FALSE(stream->Read(&response));
    return stream->Finish().error_code();
  }

  std::string dir_;
  std::unique_ptr<Authorizer> auth_;
  std::unique_ptr<ReplicationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<rv1::Replication::Stub> stub_;
};

TEST_F(ReplicationServiceTest, ClientWithEveryOtherRoleMayNotShip) {
  EXPECT_EQ(ShipCall(kClientToken), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ShipOnStream(kClientToken), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ReplicationServiceTest, KnownIdentityWithoutGrantMayNotShip) {
  // The replica identity's token is known, but nothing grants it a role.
  EXPECT_EQ(ShipCall(kReplicaToken), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ShipOnStream(kReplicaToken), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ReplicationServiceTest, AnonymousCallerMayNotShip) {
  EXPECT_EQ(ShipCall(nullptr), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ShipOnStream(nullptr), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ReplicationServiceTest, ShutdownEndsAPeersOpenStreamAndRefusesNewOnes) {
  // A peer's stream, open and waiting for its first round.
  std::unique_ptr<grpc::ClientContext> context = As(kPeerToken);
  auto stream = stub_->ShipStream(context.get());
  absl::SleepFor(absl::Milliseconds(200));  // Until the service holds it.

  service_->CloseStreams();
  rv1::ShipResponse response;
  EXPECT_FALSE(stream->Read(&response));
  grpc::Status ended = stream->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();

  // A new one, from the same peer, is refused at once.
  EXPECT_EQ(ShipOnStream(kPeerToken), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace dedup::server::cluster
