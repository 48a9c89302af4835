// The etcd v3 client (server/cluster/etcd_client.h) against a real etcd on
// 127.0.0.1: reads, puts, compare-and-put on a key's revision, deletes and
// leases behave as etcd's API promises, and an unreachable etcd is
// UNAVAILABLE. Lease expiry is etcd's own clock, so one test waits for it in
// real time.

#include "server/cluster/etcd_client.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/common/etcd_process.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_certs.h"

namespace dedup::server::cluster {
namespace {

using ::dedup::test::EtcdProcess;
using ::dedup::test::EtcdTlsFiles;
using ::dedup::test::TempDir;

class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto etcd = EtcdProcess::Start(dir_->path());
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = etcd->release();
  }

  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(etcd_, nullptr);
    client_ = Connect({etcd_->endpoint()});
    ASSERT_NE(client_, nullptr);
    // Keys of each test live under their own prefix.
    prefix_ = std::string("/dedup-test/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }

  static std::unique_ptr<EtcdClient> Connect(std::vector<std::string> endpoints,
                                             absl::Duration timeout = absl::Seconds(5)) {
    EtcdOptions options;
    options.endpoints = std::move(endpoints);
    options.call_timeout = timeout;
    auto client = EtcdClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::string Key(const std::string& name) const { return prefix_ + name; }

  static TempDir* dir_;
  static EtcdProcess* etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
};

TempDir* EtcdClientTest::dir_ = nullptr;
EtcdProcess* EtcdClientTest::etcd_ = nullptr;

TEST_F(EtcdClientTest, PutThenGetReturnsTheValueAndItsRevisions) {
  auto revision = client_->Put(Key("map"), "version 1");
  ASSERT_TRUE(revision.ok()) << revision.status();
  auto kv = client_->Get(Key("map"));
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_TRUE(kv->has_value());
  EXPECT_EQ((*kv)->value, "version 1");
  EXPECT_EQ((*kv)->mod_revision, *revision);
  EXPECT_EQ((*kv)->version, 1);

  ASSERT_TRUE(client_->Put(Key("map"), "version 2").ok());
  kv = client_->Get(Key("map"));
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ((*kv)->value, "version 2");
  EXPECT_GT((*kv)->mod_revision, *revision);
  EXPECT_EQ((*kv)->create_revision, *revision);
  EXPECT_EQ((*kv)->version, 2);
}

TEST_F(EtcdClientTest, GetOfAnAbsentKeyIsEmpty) {
  auto kv = client_->Get(Key("never-written"));
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_FALSE(kv->has_value());
}

TEST_F(EtcdClientTest, GetPrefixReturnsOnlyKeysUnderThePrefixInKeyOrder) {
  ASSERT_TRUE(client_->Put(Key("nodes/b"), "2").ok());
  ASSERT_TRUE(client_->Put(Key("nodes/a"), "1").ok());
  ASSERT_TRUE(client_->Put(Key("nodes0"), "just past the prefix").ok());
  ASSERT_TRUE(client_->Put(Key("node"), "just before it").ok());
  auto kvs = client_->GetPrefix(Key("nodes/"));
  ASSERT_TRUE(kvs.ok()) << kvs.status();
  ASSERT_EQ(kvs->size(), 2u);
  EXPECT_EQ((*kvs)[0].key, Key("nodes/a"));
  EXPECT_EQ((*kvs)[1].key, Key("nodes/b"));
}

TEST_F(EtcdClientTest, CompareAndPutWritesOnlyAtTheExpectedRevision) {
  auto created = client_->CompareAndPut(Key("leader"), "node-1", /*expected_mod_revision=*/0);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*created);
  auto again = client_->CompareAndPut(Key("leader"), "node-2", 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again) << "created twice";

  auto seen = client_->Get(Key("leader"));
  ASSERT_TRUE(seen.ok() && seen->has_value());
  auto moved = client_->CompareAndPut(Key("leader"), "node-2", (*seen)->mod_revision);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_TRUE(*moved);
  auto stale = client_->CompareAndPut(Key("leader"), "node-3", (*seen)->mod_revision);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_FALSE(*stale) << "written from a stale revision";

  auto now = client_->Get(Key("leader"));
  ASSERT_TRUE(now.ok() && now->has_value());
  EXPECT_EQ((*now)->value, "node-2");
}

TEST_F(EtcdClientTest, DeleteRemovesTheKeyOnce) {
  ASSERT_TRUE(client_->Put(Key("gone"), "x").ok());
  auto deleted = client_->Delete(Key("gone"));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1);
  deleted = client_->Delete(Key("gone"));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 0);
  auto kv = client_->Get(Key("gone"));
  ASSERT_TRUE(kv.ok());
  EXPECT_FALSE(kv->has_value());
}

TEST_F(EtcdClientTest, RevokingALeaseDeletesItsKeys) {
  auto lease = client_->GrantLease(absl::Seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_GE(lease->ttl, absl::Seconds(30));
  ASSERT_TRUE(client_->Put(Key("leader/7"), "node-1", lease->id).ok());
  auto kv = client_->Get(Key("leader/7"));
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ((*kv)->lease, lease->id);

  ASSERT_TRUE(client_->RevokeLease(lease->id).ok());
  kv = client_->Get(Key("leader/7"));
  ASSERT_TRUE(kv.ok());
  EXPECT_FALSE(kv->has_value()) << "the key outlived its revoked lease";
  auto renewed = client_->KeepAliveOnce(lease->id);
  EXPECT_EQ(renewed.status().code(), absl::StatusCode::kNotFound) << renewed.status();
}

TEST_F(EtcdClientTest, ALeaseKeptAliveOutlivesItsTtlAndEndsWhenNoLongerRenewed) {
  auto lease = client_->GrantLease(absl::Seconds(2));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->Put(Key("leader/1"), "node-1", lease->id).ok());
  // Renewed for longer than the TTL: the key stays.
  const absl::Time renew_until = absl::Now() + lease->ttl + absl::Seconds(1);
  while (absl::Now() < renew_until) {
    auto ttl = client_->KeepAliveOnce(lease->id);
    ASSERT_TRUE(ttl.ok()) << ttl.status();
    EXPECT_GE(*ttl, absl::Seconds(1));
    absl::SleepFor(absl::Milliseconds(300));
  }
  auto kv = client_->Get(Key("leader/1"));
  ASSERT_TRUE(kv.ok() && kv->has_value()) << "a renewed lease ended";

  // No longer renewed: etcd ends it within its TTL (plus etcd's own check
  // interval), and the key goes with it.
  const absl::Time give_up = absl::Now() + lease->ttl + absl::Seconds(5);
  bool gone = false;
  while (!gone && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(200));
    kv = client_->Get(Key("leader/1"));
    ASSERT_TRUE(kv.ok()) << kv.status();
    gone = !kv->has_value();
  }
  EXPECT_TRUE(gone) << "the key outlived its lease";
  EXPECT_EQ(client_->KeepAliveOnce(lease->id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EtcdClientTest, AnUnreachableMemberIsSkippedAndNoMemberAtAllIsUnavailable) {
  // A port nothing listens on: 127.0.0.1:1 is privileged and unused here.
  auto with_dead_first = Connect({"127.0.0.1:1", etcd_->endpoint()}, absl::Seconds(2));
  ASSERT_NE(with_dead_first, nullptr);
  ASSERT_TRUE(with_dead_first->Put(Key("k"), "v").ok());
  auto kv = with_dead_first->Get(Key("k"));
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_TRUE(kv->has_value());

  auto only_dead = Connect({"127.0.0.1:1"}, absl::Milliseconds(500));
  ASSERT_NE(only_dead, nullptr);
  EXPECT_EQ(only_dead->Get(Key("k")).status().code(), absl::StatusCode::kUnavailable);
}

TEST(EtcdClientOptionsTest, ConnectNeedsEndpointsAndAPositiveTimeout) {
  EtcdOptions none;
  EXPECT_EQ(EtcdClient::Connect(none).status().code(), absl::StatusCode::kInvalidArgument);
  EtcdOptions no_timeout;
  no_timeout.endpoints = {"127.0.0.1:2379"};
  no_timeout.call_timeout = absl::ZeroDuration();
  EXPECT_EQ(EtcdClient::Connect(no_timeout).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EtcdClientTlsTest, TheClientSpeaksMutualTlsAndEtcdRefusesACallerWithoutACertificate) {
  test::TestCerts certs;
  TempDir dir;
  const EtcdTlsFiles tls{certs.Pem("ca"), certs.Pem("server"), certs.Key("server"),
                         certs.Pem("client"), certs.Key("client")};
  auto etcd = EtcdProcess::Start(dir.path(), &tls);
  ASSERT_TRUE(etcd.ok()) << etcd.status();

  auto connect = [&](bool with_certificate) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = test::ReadFile(certs.Pem("ca"));
    if (with_certificate) {
      ssl.pem_cert_chain = test::ReadFile(certs.Pem("client"));
      ssl.pem_private_key = test::ReadFile(certs.Key("client"));
    }
    EtcdOptions options;
    options.endpoints = {(*etcd)->endpoint()};
    options.call_timeout = absl::Seconds(with_certificate ? 5 : 1);
    options.credentials = grpc::SslCredentials(ssl);
    auto client = EtcdClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  };
  std::unique_ptr<EtcdClient> client = connect(true);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Put("/dedup-test/tls", "over mutual TLS").ok());
  absl::StatusOr<std::optional<EtcdKeyValue>> read = client->Get("/dedup-test/tls");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->value, "over mutual TLS");

  std::unique_ptr<EtcdClient> stranger = connect(false);
  ASSERT_NE(stranger, nullptr);
  EXPECT_EQ(stranger->Get("/dedup-test/tls").status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dedup::server::cluster
