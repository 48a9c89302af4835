// The test etcd itself: it answers at its endpoint, and a restart on the
// same data directory and ports keeps every key.
#include "tests/common/etcd_process.h"

#include <chrono>
#include <memory>

#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace dedup::test {
namespace {

class EtcdProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = EtcdProcess::Start(dir_.path());
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
  }

  // A fresh channel each time: etcd may just have come back.
  std::unique_ptr<etcdserverpb::KV::Stub> Kv() {
    return etcdserverpb::KV::NewStub(
        grpc::CreateChannel(etcd_->endpoint(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Put(const std::string& key, const std::string& value) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    etcdserverpb::PutRequest request;
    request.set_key(key);
    request.set_value(value);
    etcdserverpb::PutResponse response;
    return Kv()->Put(&context, request, &response);
  }

  // The key's value; an error status when etcd does not answer.
  grpc::Status Get(const std::string& key, std::string* value) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    etcdserverpb::RangeRequest request;
    request.set_key(key);
    etcdserverpb::RangeResponse response;
    grpc::Status status = Kv()->Range(&context, request, &response);
    if (status.ok()) value->assign(response.kvs_size() > 0 ? response.kvs(0).value() : "");
    return status;
  }

  TempDir dir_;
  std::unique_ptr<EtcdProcess> etcd_;
};

TEST_F(EtcdProcessTest, StopsAndRestartsOnTheSameEndpointWithEveryKey) {
  ASSERT_TRUE(Put("/dedup-test/kept", "across restarts").ok());
  const std::string endpoint = etcd_->endpoint();

  etcd_->Stop();
  EXPECT_FALSE(etcd_->running());
  std::string value;
  EXPECT_FALSE(Get("/dedup-test/kept", &value).ok()) << "a stopped etcd answered";

  const absl::Status restarted = etcd_->Restart();
  ASSERT_TRUE(restarted.ok()) << restarted;
  EXPECT_TRUE(etcd_->running());
  EXPECT_EQ(etcd_->endpoint(), endpoint);
  ASSERT_TRUE(Get("/dedup-test/kept", &value).ok());
  EXPECT_EQ(value, "across restarts");
}

TEST_F(EtcdProcessTest, RestartRefusesWhileRunning) {
  EXPECT_EQ(etcd_->Restart().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dedup::test
