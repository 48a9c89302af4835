// dedup::client::Client against a real in-process DedupServer, with and
// without coalescing onto Stream batches.
#include "dedup/client/client.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/server_settings.h"
#include "tests/server/test_server.h"

namespace dedup::client {
namespace {

using server::test::TestServer;

v1::ClaimRequest ClaimOf(const std::string& key, const std::string& owner) {
  v1::ClaimRequest r;
  r.set_namespace_("orders");
  r.set_key(key);
  r.set_owner(owner);
  return r;
}

v1::CompleteRequest CompleteOf(const std::string& key, uint64_t token, const std::string& result) {
  v1::CompleteRequest r;
  r.set_namespace_("orders");
  r.set_key(key);
  r.set_token(token);
  r.set_result(result);
  return r;
}

// Runs every test with coalescing on (Stream batches) and off (unary calls).
class ClientTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto server = TestServer::Start(R"pb(durability: "buffered")pb", nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = NewClient(absl::StrCat("127.0.0.1:", server_->server().port()));
  }

  std::unique_ptr<Client> NewClient(const std::string& endpoint) {
    ClientOptions options;
    options.endpoint = endpoint;
    options.coalesce = GetParam();
    auto client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(ClientTest, ClaimCompleteAndDuplicateClaimReturnStoredResult) {
  auto claimed = client_->Claim(ClaimOf("o-1", "worker-a"));
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);

  auto completed = client_->Complete(CompleteOf("o-1", claimed->token(), "receipt-1"));
  ASSERT_TRUE(completed.ok()) << completed.status();
  EXPECT_EQ(completed->outcome(), v1::CompleteResponse::OK);

  auto duplicate = client_->Claim(ClaimOf("o-1", "worker-b"));
  ASSERT_TRUE(duplicate.ok()) << duplicate.status();
  EXPECT_EQ(duplicate->outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(duplicate->result(), "receipt-1");
}

TEST_P(ClientTest, AsyncCallbackRunsExactlyOnceWithTheAnswer) {
  std::atomic<int> calls{0};
  absl::Notification done;
  v1::ClaimResponse seen;
  client_->ClaimAsync(ClaimOf("o-async", "worker-a"),
                      [&](absl::StatusOr<v1::ClaimResponse> response) {
                        ASSERT_TRUE(response.ok()) << response.status();
                        seen = *response;
                        calls.fetch_add(1);
                        done.Notify();
                      });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(seen.outcome(), v1::ClaimResponse::ACQUIRED);
  client_.reset();  // Waits for anything in flight; no second callback may come.
  EXPECT_EQ(calls.load(), 1);
}

TEST_P(ClientTest, FutureFormResolvesToTheResponse) {
  auto claim = client_->ClaimFuture(ClaimOf("o-future", "worker-a")).get();
  ASSERT_TRUE(claim.ok()) << claim.status();
  auto complete = client_->CompleteFuture(CompleteOf("o-future", claim->token(), "r")).get();
  ASSERT_TRUE(complete.ok()) << complete.status();
  EXPECT_EQ(complete->outcome(), v1::CompleteResponse::OK);
}

TEST_P(ClientTest, ConcurrentCallersEachGetTheirOwnAnswer) {
  constexpr int kThreads = 16;
  constexpr int kKeys = 150;
  std::vector<std::thread> threads;
  std::atomic<int> acquired{0}, failures{0}, own_acquired{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeys; ++k) {
        // Every thread claims its own keys, and a key shared by all threads.
        auto own = client_->Claim(ClaimOf(absl::StrCat("t", t, "-k", k), absl::StrCat("w", t)));
        auto shared = client_->Claim(ClaimOf(absl::StrCat("shared-", k), absl::StrCat("w", t)));
        if (!own.ok() || !shared.ok() || own->outcome() != v1::ClaimResponse::ACQUIRED) {
          failures.fetch_add(1);
          continue;
        }
        own_acquired.fetch_add(1);
        if (shared->outcome() == v1::ClaimResponse::ACQUIRED) acquired.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(acquired.load(), kKeys) << "each shared key must be acquired exactly once";
  EXPECT_EQ(own_acquired.load(), kThreads * kKeys);
}

TEST_P(ClientTest, BadInputComesBackAsInvalidArgumentWithoutRetry) {
  auto claimed = client_->Claim(ClaimOf("", "worker-a"));
  ASSERT_FALSE(claimed.ok());
  EXPECT_EQ(claimed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(claimed.status().message().rfind("key", 0), 0u) << claimed.status();
}

TEST_P(ClientTest, UnreachableServerIsUnavailableOnceTheDeadlinePasses) {
  const int port = server_->server().port();
  server_.reset();  // Nothing listens on the port any more.
  auto client = NewClient(absl::StrCat("127.0.0.1:", port));
  CallOptions options;
  options.deadline = absl::Now() + absl::Milliseconds(300);
  auto claimed = client->Claim(ClaimOf("o-down", "worker-a"), options);
  ASSERT_FALSE(claimed.ok());
  EXPECT_TRUE(absl::IsUnavailable(claimed.status()) || absl::IsDeadlineExceeded(claimed.status()))
      << claimed.status();
}

TEST_P(ClientTest, RetriesUnavailableUntilTheServerIsBack) {
  const int port = server_->server().port();
  server_.reset();
  auto client = NewClient(absl::StrCat("127.0.0.1:", port));

  server::test::TempDir dir;
  v1::ServerConfig config;
  config.set_listen(absl::StrCat("127.0.0.1:", port));
  config.set_data_dir(dir.path() + "/data");
  config.set_durability("buffered");
  config.set_metrics_listen("off");
  auto settings = server::ResolveSettings(config);
  ASSERT_TRUE(settings.ok()) << settings.status();

  CallOptions options;
  options.deadline = absl::Now() + absl::Seconds(20);
  auto pending = client->ClaimFuture(ClaimOf("o-retry", "worker-a"), options);
  // The first attempts fail while nothing listens; the call keeps retrying.
  absl::SleepFor(absl::Milliseconds(200));
  auto restarted = server::DedupServer::Start(*settings);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  auto claimed = pending.get();
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
  client.reset();
  (*restarted)->Shutdown(absl::Seconds(1));
}

TEST_P(ClientTest, HealthIsOkWhileServing) { EXPECT_TRUE(client_->Health().ok()); }

TEST_P(ClientTest, ScanReturnsRecordsOfTheNamespace) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client_->Claim(ClaimOf(absl::StrCat("scan-", i), "worker-a")).ok());
  }
  v1::ScanRequest scan;
  scan.set_namespace_("orders");
  scan.set_state(v1::STATE_IN_PROGRESS);
  auto records = client_->Scan(scan);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(records->size(), 5u);
}

INSTANTIATE_TEST_SUITE_P(CoalescedAndUnary, ClientTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Coalesced" : "Unary"; });

TEST(ClientOptionsTest, RejectsBadOptions) {
  ClientOptions options;
  options.max_batch = 0;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ClientOptions();
  options.endpoint = "";
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dedup::client
