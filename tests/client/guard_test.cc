// dedup::client::Guard, the idempotent-consumer pattern, against a real
// in-process DedupServer.
#include "dedup/client/guard.h"

#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/examples/payment_provider.h"
#include "gtest/gtest.h"
#include "tests/client/fake_clock.h"
#include "tests/server/test_server.h"

namespace dedup::client {
namespace {

using server::test::TestServer;

constexpr char kConfig[] = R"pb(
  durability: "buffered"
  namespaces {
    name: "payments"
    policy { max_attempts: 2 lease_default: "5s" }
  }
)pb";

class GuardTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(nullptr); }

  // Restarts server and client, the server on `server_clock` and the client
  // on `client_clock` (null: the system's).
  void Start(const storage::Clock* server_clock, const Clock* client_clock = nullptr) {
    client_.reset();
    server_.reset();
    auto server = TestServer::Start(kConfig, server_clock);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions options;
    options.endpoint = absl::StrCat("127.0.0.1:", server_->server().port());
    options.clock = client_clock;
    // On a clock moved by hand a batch would wait for its window until the
    // test moves it: send each call on its own.
    options.coalesce = client_clock == nullptr;
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  Guard NewGuard(const std::string& owner, absl::Duration lease = absl::Seconds(5)) {
    GuardOptions options;
    options.ns = "payments";
    options.owner = owner;
    options.lease = lease;
    return Guard(client_.get(), options);
  }

  v1::ClaimResponse ClaimAs(const std::string& key, const std::string& owner) {
    v1::ClaimRequest r;
    r.set_namespace_("payments");
    r.set_key(key);
    r.set_owner(owner);
    auto response = client_->Claim(r);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : v1::ClaimResponse();
  }

  // When the server says the lease of `key` ends; 0 if the call failed.
  int64_t LeaseExpiresMs(const std::string& key) {
    v1::QueryRequest r;
    r.set_namespace_("payments");
    r.set_key(key);
    auto response = client_->Query(r);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->record().lease_expires_ms() : 0;
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
};

// Waits for something another thread does (a renewal reaching the server),
// polling: true once `done` holds, false if it does not within 10 s.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

SideEffect Returning(std::string result, std::atomic<int>* runs) {
  return [result, runs](const GuardContext&) -> absl::StatusOr<std::string> {
    runs->fetch_add(1);
    return result;
  };
}

TEST_F(GuardTest, RunsOnceAndHandsTheStoredResultToDuplicates) {
  Guard a = NewGuard("worker-a");
  Guard b = NewGuard("worker-b");
  std::atomic<int> runs{0};
  auto first = a.Run("pay-1", Returning("receipt-1", &runs));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, GuardOutcome::kExecuted);
  EXPECT_EQ(first->result, "receipt-1");
  EXPECT_GT(first->token, 0u);

  auto second = b.Run("pay-1", Returning("receipt-2", &runs));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->outcome, GuardOutcome::kDuplicate);
  EXPECT_EQ(second->result, "receipt-1");
  EXPECT_EQ(runs.load(), 1);
}

TEST_F(GuardTest, SideEffectGetsTheKeyAndTheFencingToken) {
  Guard a = NewGuard("worker-a");
  std::string seen_key;
  uint64_t seen_token = 0;
  auto result = a.Run("pay-ctx", [&](const GuardContext& ctx) -> absl::StatusOr<std::string> {
    seen_key = ctx.key;
    seen_token = ctx.token;
    return std::string("ok");
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(seen_key, "pay-ctx");
  EXPECT_EQ(seen_token, result->token);
}

TEST_F(GuardTest, KeyHeldByAnotherWorkerIsInProgressAndNothingRuns) {
  ClaimAs("pay-held", "worker-x");
  Guard a = NewGuard("worker-a");
  std::atomic<int> runs{0};
  auto result = a.Run("pay-held", Returning("r", &runs));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outcome, GuardOutcome::kInProgress);
  EXPECT_EQ(runs.load(), 0);
}

TEST_F(GuardTest, FailedSideEffectIsReleasedSoARedeliveryRunsIt) {
  Guard a = NewGuard("worker-a");
  auto failed = a.Run("pay-retry", [](const GuardContext&) -> absl::StatusOr<std::string> {
    return absl::UnavailableError("provider timed out");
  });
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->outcome, GuardOutcome::kWorkFailed);
  EXPECT_EQ(failed->work_error.message(), "provider timed out");
  EXPECT_FALSE(failed->poisoned);

  std::atomic<int> runs{0};
  auto redelivered = NewGuard("worker-b").Run("pay-retry", Returning("receipt", &runs));
  ASSERT_TRUE(redelivered.ok()) << redelivered.status();
  EXPECT_EQ(redelivered->outcome, GuardOutcome::kExecuted);
  EXPECT_GT(redelivered->token, failed->token);
  EXPECT_EQ(runs.load(), 1);
}

TEST_F(GuardTest, ExceptionReleasesTheClaimAndPropagates) {
  Guard a = NewGuard("worker-a");
  EXPECT_THROW(static_cast<void>(a.Run("pay-throw",
                                       [](const GuardContext&) -> absl::StatusOr<std::string> {
                                         throw std::runtime_error("bug in the consumer");
                                       })),
               std::runtime_error);
  v1::ClaimResponse next = ClaimAs("pay-throw", "worker-b");
  EXPECT_EQ(next.outcome(), v1::ClaimResponse::ACQUIRED) << "the claim was released";
}

TEST_F(GuardTest, LastAllowedFailurePoisonsTheKey) {
  auto fail = [](const GuardContext&) -> absl::StatusOr<std::string> {
    return absl::InternalError("always fails");
  };
  auto first = NewGuard("worker-a").Run("pay-poison", fail);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->poisoned);
  auto second = NewGuard("worker-b").Run("pay-poison", fail);  // Attempt 2 of max 2.
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->outcome, GuardOutcome::kWorkFailed);
  EXPECT_TRUE(second->poisoned);
  std::atomic<int> runs{0};
  auto third = NewGuard("worker-c").Run("pay-poison", Returning("r", &runs));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->outcome, GuardOutcome::kFailed);
  EXPECT_EQ(runs.load(), 0);
}

TEST_F(GuardTest, SameKeyWithAnotherFingerprintIsAMismatch) {
  std::atomic<int> runs{0};
  ASSERT_TRUE(NewGuard("worker-a").Run("pay-fp", Returning("r", &runs), "sha-1").ok());
  auto other = NewGuard("worker-b").Run("pay-fp", Returning("r", &runs), "sha-2");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->outcome, GuardOutcome::kMismatch);
  EXPECT_EQ(runs.load(), 1);
}

// Server and client each on a clock of their own, moved together by hand:
// the guard renews on the client's, the server ends leases on its own.
class GuardLeaseTest : public GuardTest {
 protected:
  void SetUp() override { Start(&server_clock_, &client_clock_); }
  // Before the clocks they run on go.
  void TearDown() override {
    client_.reset();
    server_.reset();
  }

  // Time passes for both; the server's first, so that a renewal the client
  // sends on its tick is read at the server's new time.
  void Pass(absl::Duration d) {
    server_clock_.AdvanceMs(absl::ToInt64Milliseconds(d));
    client_clock_.Advance(d);
  }

  storage::ManualClock server_clock_{server::test::kStartMs};
  test::FakeClock client_clock_;
};

TEST_F(GuardLeaseTest, LeaseIsRenewedWhileLongWorkRuns) {
  Guard a = NewGuard("worker-a", absl::Seconds(3));  // Renewed every second.
  std::vector<v1::ClaimResponse::Outcome> seen_by_others;
  auto result = a.Run("pay-long", [&](const GuardContext& ctx) -> absl::StatusOr<std::string> {
    // Five seconds of work under a three-second lease.
    for (int second = 1; second <= 5; ++second) {
      Pass(absl::Seconds(1));
      const int64_t renewed_until = server_clock_.NowMs() + 3'000;
      if (!Eventually([&] { return LeaseExpiresMs("pay-long") == renewed_until; })) {
        return absl::InternalError(absl::StrCat("no renewal at second ", second));
      }
      seen_by_others.push_back(ClaimAs("pay-long", "worker-b").outcome());
    }
    return absl::StrCat("lease lost: ", ctx.lease_lost.load());
  });
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outcome, GuardOutcome::kExecuted) << result->work_error;
  EXPECT_EQ(result->result, "lease lost: 0");
  EXPECT_EQ(seen_by_others.size(), 5u);
  for (auto outcome : seen_by_others) EXPECT_EQ(outcome, v1::ClaimResponse::IN_PROGRESS);
}

// A worker that stalls past its lease (its renewals never reach the server)
// learns, at its next renewal, that another worker took the key over; its
// Complete is then refused.
TEST_F(GuardLeaseTest, LeaseLostIsRaisedOnceAnotherWorkerTookTheKeyOver) {
  Guard a = NewGuard("worker-a", absl::Seconds(3));
  auto result = a.Run("pay-lost", [&](const GuardContext& ctx) -> absl::StatusOr<std::string> {
    server_clock_.AdvanceMs(3'001);  // Only the server's time passes: no renewal.
    EXPECT_EQ(ClaimAs("pay-lost", "worker-b").outcome(), v1::ClaimResponse::ACQUIRED);
    EXPECT_FALSE(ctx.lease_lost.load());
    client_clock_.Advance(absl::Seconds(1));  // The renewal goes, with the old token.
    EXPECT_TRUE(Eventually([&] { return ctx.lease_lost.load(); }));
    return std::string("done too late");
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outcome, GuardOutcome::kStale);
}

// The field case of a worker that claims and dies: after its lease a
// redelivery runs once with a larger token, the dead worker's late Complete
// is refused, and so is its late charge at a provider that checks tokens.
TEST_F(GuardTest, DeadWorkersLeaseExpiresAndItsLateCompleteIsStale) {
  storage::ManualClock clock(server::test::kStartMs);
  Start(&clock);
  examples::PaymentProvider provider({absl::ZeroDuration(), 0});

  v1::ClaimResponse dead = ClaimAs("pay-dead", "worker-dead");
  ASSERT_EQ(dead.outcome(), v1::ClaimResponse::ACQUIRED);
  std::atomic<int> runs{0};
  auto early = NewGuard("worker-b").Run("pay-dead", Returning("r", &runs));
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->outcome, GuardOutcome::kInProgress) << "the lease still protects the key";

  clock.AdvanceMs(5'001);  // Past the namespace's 5 s lease.
  auto redelivered =
      NewGuard("worker-b")
          .Run("pay-dead", [&](const GuardContext& ctx) -> absl::StatusOr<std::string> {
            runs.fetch_add(1);
            absl::Status charged = provider.Charge(ctx.key, ctx.token, 1);
            if (!charged.ok()) return charged;
            return std::string("charged");
          });
  ASSERT_TRUE(redelivered.ok()) << redelivered.status();
  EXPECT_EQ(redelivered->outcome, GuardOutcome::kExecuted);
  EXPECT_GT(redelivered->token, dead.token());
  EXPECT_EQ(runs.load(), 1);

  v1::CompleteRequest late;
  late.set_namespace_("payments");
  late.set_key("pay-dead");
  late.set_token(dead.token());
  auto late_complete = client_->Complete(late);
  ASSERT_TRUE(late_complete.ok()) << late_complete.status();
  EXPECT_EQ(late_complete->outcome(), v1::CompleteResponse::STALE_TOKEN);
  EXPECT_FALSE(provider.Charge("pay-dead", dead.token(), 1).ok());
  EXPECT_EQ(provider.charges(), 1);
}

}  // namespace
}  // namespace dedup::client
