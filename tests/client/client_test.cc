// dedup::client::Client against a real in-process DedupServer, and its
// retries against a scripted server on a clock the test moves; each with and
// without coalescing onto Stream batches.
#include "dedup/client/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/client/fake_clock.h"
#include "tests/client/scripted_dedup.h"
#include "tests/server/test_server.h"

namespace dedup::client {
namespace {

using server::test::TestServer;
using test::FakeClock;
using test::ScriptedDedup;

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

// Answers arrive on the client's one completion thread, not on the threads
// of gRPC's callback API: two of those poll in turn and hand each answer
// between them, which costs more CPU per call (bench/RESULTS.md, "The
// client's own completion thread").
TEST_P(ClientTest, AnswersArriveOnTheClientsCompletionThread) {
  std::string thread_name;
  absl::Notification done;
  client_->ClaimAsync(ClaimOf("o-thread", "worker-a"),
                      [&](absl::StatusOr<v1::ClaimResponse> response) {
                        EXPECT_TRUE(response.ok()) << response.status();
                        char name[16] = {};
                        pthread_getname_np(pthread_self(), name, sizeof(name));
                        thread_name = name;
                        done.Notify();
                      });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(thread_name, "dedup-client-cq");
}

// A blocking call from a callback would wait for the very thread that runs
// the callback; it is refused at once instead of hanging the client.
TEST_P(ClientTest, ABlockingCallFromACallbackIsRefusedAtOnce) {
  absl::Status nested;
  absl::Notification done;
  client_->ClaimAsync(ClaimOf("o-nested", "worker-a"),
                      [&](absl::StatusOr<v1::ClaimResponse> response) {
                        EXPECT_TRUE(response.ok()) << response.status();
                        nested = client_->Claim(ClaimOf("o-nested-2", "worker-a")).status();
                        done.Notify();
                      });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsFailedPrecondition(nested)) << nested;
  // Outside a callback the same call goes through.
  auto claimed = client_->Claim(ClaimOf("o-nested-2", "worker-a"));
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
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

// The client against a ScriptedDedup, on a clock the test moves: backoffs,
// batch windows and deadlines pass only when the test says so.
class ClientRetryTest : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<Client> NewClient(const ScriptedDedup& server,
                                    absl::Duration max_backoff = absl::Milliseconds(500)) {
    ClientOptions options;
    options.endpoint = server.address();
    options.coalesce = GetParam();
    options.max_backoff = max_backoff;
    options.clock = &clock_;
    auto client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Moves the clock on by `step` at a time until `call` has its answer, and
  // stores it in `*answer`. Each step leaves the client's threads up to a
  // millisecond of real time to act on it. False if no answer came within
  // a minute of real time; the call is then ended by moving the clock past
  // any deadline.
  template <typename T>
  bool AdvanceUntilAnswered(std::future<T>& call, absl::Duration step, T* answer) {
    const absl::Time give_up = absl::Now() + absl::Minutes(1);
    while (call.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
      if (absl::Now() > give_up) {
        clock_.Advance(absl::Hours(24 * 365));
        return false;
      }
      clock_.Advance(step);
    }
    *answer = call.get();
    return true;
  }

  FakeClock clock_;
};

TEST_P(ClientRetryTest, UnavailableIsRetriedAfterBackoffUntilTheServerAnswers) {
  ScriptedDedup server(/*unavailable_claims=*/3);
  ASSERT_FALSE(server.address().empty());
  auto client = NewClient(server);
  CallOptions options;
  options.deadline = clock_.Now() + absl::Minutes(1);
  const SteadyTime start = clock_.SteadyNow();
  auto call = client->ClaimFuture(ClaimOf("o-retry", "worker-a"), options);
  absl::StatusOr<v1::ClaimResponse> claimed;
  ASSERT_TRUE(AdvanceUntilAnswered(call, absl::Milliseconds(1), &claimed));
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(claimed->token(), ScriptedDedup::kToken);
  EXPECT_EQ(server.claims(), 4);
  // Three backoffs of 10, 20 and 40 ms, each at least half of it.
  EXPECT_GE(clock_.SteadyNow() - start, absl::Milliseconds(35));
}

TEST_P(ClientRetryTest, UnavailableIsReturnedOnceTheNextRetryWouldPassTheDeadline) {
  ScriptedDedup server(/*unavailable_claims=*/1'000'000);
  ASSERT_FALSE(server.address().empty());
  auto client = NewClient(server);
  CallOptions options;
  options.deadline = clock_.Now() + absl::Milliseconds(300);
  auto call = client->ClaimFuture(ClaimOf("o-down", "worker-a"), options);
  absl::StatusOr<v1::ClaimResponse> claimed;
  ASSERT_TRUE(AdvanceUntilAnswered(call, absl::Milliseconds(1), &claimed));
  ASSERT_FALSE(claimed.ok());
  // DEADLINE_EXCEEDED if the deadline passed with an attempt on the way.
  EXPECT_TRUE(absl::IsUnavailable(claimed.status()) || absl::IsDeadlineExceeded(claimed.status()))
      << claimed.status();
  EXPECT_GE(server.claims(), 2) << "retried";
}

// The deadline is a date read once: a step of the wall clock during the
// call (NTP, an operator) neither ends the call early nor keeps it longer.
TEST_P(ClientRetryTest, SettingTheWallClockDuringACallDoesNotMoveItsDeadline) {
  ScriptedDedup server(/*unavailable_claims=*/1'000'000);
  ASSERT_FALSE(server.address().empty());
  auto client = NewClient(server, /*max_backoff=*/absl::Milliseconds(20));
  CallOptions options;
  options.deadline = clock_.Now() + absl::Seconds(1);
  const SteadyTime start = clock_.SteadyNow();
  auto call = client->ClaimFuture(ClaimOf("o-step", "worker-a"), options);
  clock_.StepWallClock(absl::Hours(1));
  absl::StatusOr<v1::ClaimResponse> claimed;
  ASSERT_TRUE(AdvanceUntilAnswered(call, absl::Milliseconds(5), &claimed));
  ASSERT_FALSE(claimed.ok());
  // It gave up only when a wait of at most 20 ms would have passed 1 s.
  EXPECT_GE(clock_.SteadyNow() - start, absl::Milliseconds(980));
}

INSTANTIATE_TEST_SUITE_P(CoalescedAndUnary, ClientRetryTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Coalesced" : "Unary"; });

// Coalescing on a clock that never moves, with an hour-long window: calls
// can only be answered if they never wait for the window. One batch in the
// air at most, so that the others wait for its answer.
class NagleCoalescingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = TestServer::Start(R"pb(durability: "buffered")pb", nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions options;
    options.endpoint = absl::StrCat("127.0.0.1:", server_->server().port());
    options.coalesce = true;
    options.batch_window = absl::Hours(1);
    options.max_batches_in_flight = 1;
    options.clock = &clock_;
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  FakeClock clock_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(NagleCoalescingTest, ALoneCallLeavesAtOnce) {
  auto call = std::async(std::launch::async, [&] { return client_->Claim(ClaimOf("o-1", "w")); });
  ASSERT_EQ(call.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "the call waited for the batch window";
  auto claimed = call.get();
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
}

TEST_F(NagleCoalescingTest, CallsMadeWhileABatchIsInTheAirLeaveWhenItIsAnswered) {
  constexpr int kCallers = 32;
  constexpr int kCallsEach = 20;
  std::vector<std::future<int>> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.push_back(std::async(std::launch::async, [this, c] {
      int acquired = 0;
      for (int i = 0; i < kCallsEach; ++i) {
        auto claimed = client_->Claim(ClaimOf(absl::StrCat("k-", c, "-", i), "w"));
        if (claimed.ok() && claimed->outcome() == v1::ClaimResponse::ACQUIRED) ++acquired;
      }
      return acquired;
    }));
  }
  int acquired = 0;
  for (auto& caller : callers) {
    ASSERT_EQ(caller.wait_for(std::chrono::seconds(60)), std::future_status::ready)
        << "calls waited for the batch window";
    acquired += caller.get();
  }
  EXPECT_EQ(acquired, kCallers * kCallsEach);
}

// A port on 127.0.0.1 that nothing listens on: connections are refused.
std::string RefusingEndpoint() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  bind(fd, reinterpret_cast<sockaddr*>(&address), length);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
}

// Each stream to a node that is down ends as soon as it opens, while
// callers on other threads are still writing batches to it. Every call
// must end with an error, and the client must come through unharmed.
TEST(CoalescedStreamTest, CallsToANodeThatIsDownEndCleanly) {
  ClientOptions options;
  options.endpoint = RefusingEndpoint();
  options.coalesce = true;
  options.max_batches_in_flight = 16;
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(2);
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<std::future<int>> callers;
  for (int c = 0; c < 16; ++c) {
    callers.push_back(std::async(std::launch::async, [&client, c] {
      int wrong = 0;
      for (int i = 0; i < 30; ++i) {
        CallOptions call;
        call.deadline = absl::Now() + absl::Milliseconds(50);
        auto claimed = (*client)->Claim(ClaimOf(absl::StrCat("down-", c, "-", i), "w"), call);
        if (claimed.ok() || !(absl::IsUnavailable(claimed.status()) ||
                              absl::IsDeadlineExceeded(claimed.status()))) {
          ++wrong;
        }
      }
      return wrong;
    }));
  }
  for (auto& caller : callers) EXPECT_EQ(caller.get(), 0);
}

// The cache of COMPLETED answers (ClientOptions::completed_cache_entries)
// against a real server that the test stops, so that an answer that still
// arrives can only have come from the cache. Coalescing on and off.
class CompletedCacheTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto server = TestServer::Start(R"pb(
                                      durability: "buffered"
                                      namespaces {
                                        name: "orders"
                                        policy { retention_floor: "0s" }
                                      })pb",
                                    nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  std::unique_ptr<Client> NewClient(int entries) {
    ClientOptions options;
    options.endpoint = absl::StrCat("127.0.0.1:", server_->server().port());
    options.coalesce = GetParam();
    options.completed_cache_entries = entries;
    options.default_timeout = absl::Milliseconds(500);
    auto client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Claims and completes `key` with result "receipt-" + key.
  void ClaimAndComplete(Client& client, const std::string& key, uint64_t retention_ms = 0) {
    auto claimed = client.Claim(ClaimOf(key, "worker-a"));
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    ASSERT_EQ(claimed->outcome(), v1::ClaimResponse::ACQUIRED);
    v1::CompleteRequest complete = CompleteOf(key, claimed->token(), "receipt-" + key);
    if (retention_ms != 0) complete.set_retention_ms(retention_ms);
    auto completed = client.Complete(complete);
    ASSERT_TRUE(completed.ok()) << completed.status();
    ASSERT_EQ(completed->outcome(), v1::CompleteResponse::OK);
  }

  // Stops serving at once: the open Stream of a coalescing client would
  // hold the usual grace.
  void StopServer() { server_->server().Shutdown(absl::Milliseconds(100)); }

  std::unique_ptr<TestServer> server_;
};

TEST_P(CompletedCacheTest, ADuplicateOfACachedCompletionIsAnsweredWithoutTheServer) {
  std::unique_ptr<Client> client = NewClient(100);
  ASSERT_NO_FATAL_FAILURE(ClaimAndComplete(*client, "o-1"));
  ASSERT_NO_FATAL_FAILURE(ClaimAndComplete(*client, "o-2"));
  auto from_server = client->Claim(ClaimOf("o-1", "worker-b"));  // Cached from here on.
  ASSERT_TRUE(from_server.ok()) << from_server.status();
  ASSERT_EQ(from_server->outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_GT(from_server->retention_remaining_ms(), 0u);

  StopServer();

  auto cached = client->Claim(ClaimOf("o-1", "worker-c"));
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(cached->outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(cached->result(), "receipt-o-1");
  EXPECT_EQ(cached->token(), from_server->token());
  EXPECT_EQ(cached->completed_ms(), from_server->completed_ms());
  EXPECT_EQ(cached->attempts(), from_server->attempts());
  EXPECT_LE(cached->retention_remaining_ms(), from_server->retention_remaining_ms());
  auto async = client->ClaimFuture(ClaimOf("o-1", "worker-d")).get();
  ASSERT_TRUE(async.ok()) << async.status();
  EXPECT_EQ(async->result(), "receipt-o-1");

  EXPECT_FALSE(client->Claim(ClaimOf("o-2", "worker-b")).ok())
      << "o-2's COMPLETED was never answered to a Claim, so it is not cached";
  v1::ClaimRequest other_fingerprint = ClaimOf("o-1", "worker-b");
  other_fingerprint.set_fingerprint("sha256:another-payload");
  EXPECT_FALSE(client->Claim(other_fingerprint).ok())
      << "another fingerprint must reach the server (which answers MISMATCH)";
}

TEST_P(CompletedCacheTest, IsOffByDefault) {
  std::unique_ptr<Client> client = NewClient(0);
  ASSERT_NO_FATAL_FAILURE(ClaimAndComplete(*client, "o-1"));
  ASSERT_EQ(client->Claim(ClaimOf("o-1", "worker-b"))->outcome(), v1::ClaimResponse::COMPLETED);

  StopServer();

  EXPECT_FALSE(client->Claim(ClaimOf("o-1", "worker-c")).ok());
}

TEST_P(CompletedCacheTest, KeepsOnlyTheMostRecentlyUsedAnswers) {
  std::unique_ptr<Client> client = NewClient(2);
  for (const char* key : {"o-1", "o-2", "o-3"}) {
    ASSERT_NO_FATAL_FAILURE(ClaimAndComplete(*client, key));
  }
  ASSERT_TRUE(client->Claim(ClaimOf("o-1", "worker-b")).ok());
  ASSERT_TRUE(client->Claim(ClaimOf("o-2", "worker-b")).ok());
  ASSERT_TRUE(client->Claim(ClaimOf("o-1", "worker-b")).ok());  // o-1 used last: o-2 goes next.
  ASSERT_TRUE(client->Claim(ClaimOf("o-3", "worker-b")).ok());

  StopServer();

  EXPECT_TRUE(client->Claim(ClaimOf("o-1", "worker-c")).ok());
  EXPECT_TRUE(client->Claim(ClaimOf("o-3", "worker-c")).ok());
  EXPECT_FALSE(client->Claim(ClaimOf("o-2", "worker-c")).ok()) << "evicted";
}

TEST_P(CompletedCacheTest, AnAnswerIsNotKeptPastTheRetentionTheServerReported) {
  std::unique_ptr<Client> client = NewClient(100);
  ASSERT_NO_FATAL_FAILURE(ClaimAndComplete(*client, "o-1", /*retention_ms=*/300));
  auto completed = client->Claim(ClaimOf("o-1", "worker-b"));
  ASSERT_TRUE(completed.ok()) << completed.status();
  ASSERT_EQ(completed->outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_LE(completed->retention_remaining_ms(), 300u);

  std::this_thread::sleep_for(std::chrono::milliseconds(400));

  auto after = client->Claim(ClaimOf("o-1", "worker-c"));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->outcome(), v1::ClaimResponse::ACQUIRED)
      << "the server forgot the completion, and so did the cache";
}

INSTANTIATE_TEST_SUITE_P(CoalescedAndUnary, CompletedCacheTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Coalesced" : "Unary"; });

TEST(ClientOptionsTest, RejectsBadOptions) {
  ClientOptions options;
  options.max_batch = 0;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ClientOptions();
  options.endpoint = "";
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  for (int in_flight : {0, 17}) {
    options = ClientOptions();
    options.max_batches_in_flight = in_flight;
    EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument)
        << in_flight;
  }
  options = ClientOptions();
  options.completed_cache_entries = -1;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.completed_cache_entries = 10;
  options.completed_cache_max_age = absl::ZeroDuration();
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dedup::client
