// The race the product exists for (design.md §1): at-least-once delivery hands
// the same message to several consumers at once, and exactly one of them
// may run the side effect. Every other copy is told the key is in progress
// or is handed the winner's stored result.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/common/history_checker.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using ::dedup::test::CheckHistory;
using ::dedup::test::HistoryOp;

constexpr char kNs[] = "coupon-deduct";
constexpr int kKeys = 2000;
constexpr int kConsumers = 8;
constexpr uint64_t kLongLeaseMs = 10 * 60'000;  // No lease may lapse during the run.
constexpr uint32_t kSeed = 20240601;

// What one delivery was answered.
struct Answer {
  int key = 0;
  std::string owner;
  v1::ClaimResponse claim;
  grpc::Status status;
  // When ACQUIRED: the answer to the winner's Complete.
  v1::CompleteResponse complete;
  grpc::Status complete_status;
  // The calls as the history checker reads them.
  std::vector<HistoryOp> history;
};

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

HistoryOp::Answer ClaimAnswer(const grpc::Status& status, const v1::ClaimResponse& claim) {
  if (!status.ok()) return HistoryOp::Answer::kNone;
  switch (claim.outcome()) {
    case v1::ClaimResponse::ACQUIRED:
      return HistoryOp::Answer::kAcquired;
    case v1::ClaimResponse::IN_PROGRESS:
      return HistoryOp::Answer::kInProgress;
    case v1::ClaimResponse::COMPLETED:
      return HistoryOp::Answer::kCompleted;
    case v1::ClaimResponse::FAILED:
      return HistoryOp::Answer::kFailed;
    default:
      return HistoryOp::Answer::kMismatch;
  }
}

HistoryOp::Answer CompleteAnswer(const grpc::Status& status, const v1::CompleteResponse& done) {
  if (!status.ok()) return HistoryOp::Answer::kNone;
  switch (done.outcome()) {
    case v1::CompleteResponse::OK:
      return HistoryOp::Answer::kOk;
    case v1::CompleteResponse::ALREADY_COMPLETED:
      return HistoryOp::Answer::kAlreadyCompleted;
    case v1::CompleteResponse::STALE_TOKEN:
      return HistoryOp::Answer::kStaleToken;
    default:
      return HistoryOp::Answer::kNotFound;
  }
}

std::string KeyName(int key) { return absl::StrCat("coupon-", key); }

// Each key delivered 1..3 times, in random order. A broker redelivers soon,
// so the copies of a key sit near each other: keys are shuffled, each key's
// copies put together, and then every window of twice as many deliveries as
// there are consumers is shuffled, so copies are in flight at the same time.
std::vector<int> ShuffledDeliveries(std::mt19937& rng) {
  std::vector<int> keys(kKeys);
  for (int key = 0; key < kKeys; ++key) keys[key] = key;
  std::shuffle(keys.begin(), keys.end(), rng);
  std::uniform_int_distribution<int> copies(1, 3);
  std::vector<int> deliveries;
  for (int key : keys) deliveries.insert(deliveries.end(), static_cast<size_t>(copies(rng)), key);
  constexpr size_t kWindow = 2 * kConsumers;
  for (size_t begin = 0; begin < deliveries.size(); begin += kWindow) {
    const size_t end = std::min(begin + kWindow, deliveries.size());
    std::shuffle(deliveries.begin() + begin, deliveries.begin() + end, rng);
  }
  return deliveries;
}

// A consumer: takes the next delivery off the shared queue, claims it and,
// when it wins, completes it with its own name as the result.
void Consume(v1::Dedup::Stub& stub, const std::string& owner, const std::vector<int>& deliveries,
             std::atomic<size_t>& next, std::vector<Answer>& answers) {
  for (size_t i = next.fetch_add(1); i < deliveries.size(); i = next.fetch_add(1)) {
    Answer answer;
    answer.key = deliveries[i];
    answer.owner = owner;
    {
      HistoryOp op;
      op.key = KeyName(answer.key);
      op.owner = owner;
      std::unique_ptr<grpc::ClientContext> context = NewContext();
      op.invoked = Now();
      answer.status = stub.Claim(
          context.get(), ClaimOf(kNs, KeyName(answer.key), owner, kLongLeaseMs), &answer.claim);
      op.returned = Now();
      op.answer = ClaimAnswer(answer.status, answer.claim);
      op.token = answer.claim.token();
      op.result = answer.claim.result();
      answer.history.push_back(std::move(op));
    }
    if (answer.status.ok() && answer.claim.outcome() == v1::ClaimResponse::ACQUIRED) {
      HistoryOp op;
      op.kind = HistoryOp::Kind::kComplete;
      op.key = KeyName(answer.key);
      op.owner = owner;
      op.token = answer.claim.token();
      op.result = owner;
      std::unique_ptr<grpc::ClientContext> context = NewContext();
      op.invoked = Now();
      answer.complete_status = stub.Complete(
          context.get(), CompleteOf(kNs, KeyName(answer.key), answer.claim.token(), owner),
          &answer.complete);
      op.returned = Now();
      op.answer = CompleteAnswer(answer.complete_status, answer.complete);
      answer.history.push_back(std::move(op));
    }
    answers.push_back(std::move(answer));
  }
}

TEST(ConcurrentClaimTest, ConcurrentDuplicateDeliveriesAreProcessedExactlyOnce) {
  // The real clock: the race is between real threads on a real server.
  absl::StatusOr<std::unique_ptr<TestServer>> server =
      TestServer::Start(R"pb(durability: "fsync")pb", /*clock=*/nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  std::mt19937 rng(kSeed);
  const std::vector<int> deliveries = ShuffledDeliveries(rng);

  std::atomic<size_t> next{0};
  std::vector<std::vector<Answer>> answers_by_consumer(kConsumers);
  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.emplace_back([&, c] {
      // Each consumer on its own connection, as separate processes would be.
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      std::unique_ptr<v1::Dedup::Stub> stub = v1::Dedup::NewStub(
          grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", (*server)->server().port()),
                                    grpc::InsecureChannelCredentials(), args));
      Consume(*stub, absl::StrCat("consumer-", c), deliveries, next, answers_by_consumer[c]);
    });
  }
  for (std::thread& consumer : consumers) consumer.join();

  std::vector<Answer> answers;
  for (std::vector<Answer>& some : answers_by_consumer) {
    for (Answer& answer : some) answers.push_back(std::move(answer));
  }
  ASSERT_EQ(answers.size(), deliveries.size()) << "every delivery is answered";

  // Exactly one winner per key, and its completion stuck.
  std::map<int, std::string> winner;
  std::map<int, int> acquired;
  for (const Answer& a : answers) {
    ASSERT_THAT(a.status, IsOk()) << KeyName(a.key);
    if (a.claim.outcome() != v1::ClaimResponse::ACQUIRED) continue;
    ++acquired[a.key];
    winner[a.key] = a.owner;
    EXPECT_THAT(a.complete_status, IsOk()) << KeyName(a.key);
    EXPECT_EQ(a.complete.outcome(), v1::CompleteResponse::OK) << KeyName(a.key);
  }
  ASSERT_EQ(acquired.size(), static_cast<size_t>(kKeys)) << "every key was processed";
  for (const auto& [key, times] : acquired) {
    EXPECT_EQ(times, 1) << KeyName(key) << " was acquired more than once";
  }

  // Every other delivery was stopped, and a completed answer replays the
  // winner's result.
  int in_progress = 0;
  int completed = 0;
  for (const Answer& a : answers) {
    switch (a.claim.outcome()) {
      case v1::ClaimResponse::ACQUIRED:
        break;
      case v1::ClaimResponse::IN_PROGRESS:
        ++in_progress;
        EXPECT_EQ(a.claim.holder(), winner[a.key]) << KeyName(a.key);
        break;
      case v1::ClaimResponse::COMPLETED:
        ++completed;
        EXPECT_EQ(a.claim.result(), winner[a.key]) << KeyName(a.key);
        break;
      default:
        ADD_FAILURE() << KeyName(a.key) << " answered " << a.claim.ShortDebugString();
    }
  }
  EXPECT_EQ(static_cast<size_t>(kKeys + in_progress + completed), answers.size());

  // And the history as a whole keeps every promise, in real-time order.
  std::vector<HistoryOp> history;
  for (const Answer& a : answers) history.insert(history.end(), a.history.begin(), a.history.end());
  EXPECT_THAT(CheckHistory(history), ::testing::IsEmpty());
  EXPECT_GT(in_progress, 0) << "no two copies of a key were in flight together: "
                               "the run did not exercise the race";
  RecordProperty("deliveries", static_cast<int>(deliveries.size()));
  RecordProperty("in_progress_answers", in_progress);

  // What the server remembers agrees with what the consumers were told.
  grpc::Status scan_status;
  const std::vector<v1::Record> records = ScanAll((*server)->stub(), ScanOf(kNs), &scan_status);
  ASSERT_THAT(scan_status, IsOk());
  ASSERT_EQ(records.size(), static_cast<size_t>(kKeys));
  for (const v1::Record& record : records) {
    const int key = std::stoi(record.key().substr(std::string("coupon-").size()));
    EXPECT_EQ(record.state(), v1::STATE_COMPLETED) << record.key();
    EXPECT_EQ(record.result(), winner[key]) << record.key();
    EXPECT_EQ(record.attempts(), 1u) << record.key();
  }
}

}  // namespace
}  // namespace dedup::server::test
