// Bounded resources (design.md §10): a full worker queue, calls that waited
// past their deadline, oversized messages and oversized Batch answers are
// each answered instead of held, and Stream calls past the server's bound
// are refused.

#include <pthread.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "storage/thread_name.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "orders";

// One worker and a queue of two, so a test can occupy both.
class WorkerLimitTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      execution: "workers"
      workers: 1
      limits { max_queued_tasks: 2 }
    )pb";
  }

  // Occupies the only worker until Unblock.
  void BlockTheWorker() {
    ASSERT_EQ(server_->server().pool()->Submit([this] {
      started_.Notify();
      release_.WaitForNotification();
    }),
              WorkerPool::Admission::kQueued);
    started_.WaitForNotification();
  }
  void Unblock() { release_.Notify(); }

  // Waits until the worker has run everything queued before.
  void Drain() {
    for (;;) {
      auto ran = std::make_shared<absl::Notification>();
      if (server_->server().pool()->Submit([ran] { ran->Notify(); }) ==
          WorkerPool::Admission::kQueued) {
        ran->WaitForNotification();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    ServerTest::TearDown();
  }

  absl::Notification started_;
  absl::Notification release_;
};

// Threads carry their role's name (as `top -H` shows it), cut to the 15
// bytes Linux keeps.
TEST_F(WorkerLimitTest, WorkersAndNamedThreadsShowTheirRole) {
  std::string name;
  absl::Notification ran;
  ASSERT_EQ(server_->server().pool()->Submit([&] {
    char buffer[16] = {};
    pthread_getname_np(pthread_self(), buffer, sizeof(buffer));
    name = buffer;
    ran.Notify();
  }),
            WorkerPool::Admission::kQueued);
  ran.WaitForNotification();
  EXPECT_EQ(name, "worker");

  std::string cut;
  std::thread named([&] {
    storage::NameThisThread("ship-1023-to-1024");
    char buffer[16] = {};
    pthread_getname_np(pthread_self(), buffer, sizeof(buffer));
    cut = buffer;
  });
  named.join();
  EXPECT_EQ(cut, "ship-1023-to-10");
}

TEST_F(WorkerLimitTest, AFullQueueAnswersResourceExhausted) {
  BlockTheWorker();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(server_->server().pool()->Submit([] {}), WorkerPool::Admission::kQueued);
  }

  const grpc::Status status = StatusOf(stub(), ClaimOf(kNs, "order-1", "worker-a"));

  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  v1::BatchRequest batch;
  *batch.add_operations() = Op(QueryOf(kNs, "order-1"));
  EXPECT_EQ(StatusOf(stub(), batch).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  Unblock();
  Drain();
  EXPECT_EQ(Claim(ClaimOf(kNs, "order-1", "worker-a")).outcome(), v1::ClaimResponse::ACQUIRED)
      << "the queue takes calls again once it drains";
}

TEST_F(WorkerLimitTest, ScanRunsOnItsOwnPoolWhileTheWorkersAreBusy) {
  ASSERT_EQ(Claim(ClaimOf(kNs, "order-1", "worker-a")).outcome(), v1::ClaimResponse::ACQUIRED);
  BlockTheWorker();

  grpc::Status status;
  const std::vector<v1::Record> records = ScanAll(stub(), ScanOf(kNs), &status);

  EXPECT_THAT(status, IsOk());
  EXPECT_EQ(records.size(), 1u);
}

TEST_F(WorkerLimitTest, ACallWhoseDeadlinePassedInTheQueueNeverReachesStorage) {
  BlockTheWorker();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  v1::ClaimResponse ignored;
  const grpc::Status status = stub().Claim(&context, ClaimOf(kNs, "order-1", "worker-a"), &ignored);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server's deadline counts from when the call reached it, a little
  // after the client's: let it pass too.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  Unblock();

  // The Query queues behind the expired Claim on the one worker.
  EXPECT_EQ(Query(QueryOf(kNs, "order-1")).record().state(), v1::STATE_ABSENT)
      << "the abandoned Claim was not applied";
}

TEST_F(WorkerLimitTest, ACancelledCallNeverReachesStorage) {
  BlockTheWorker();
  grpc::ClientContext context;
  v1::ClaimResponse ignored;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    context.TryCancel();
  });
  const grpc::Status status = stub().Claim(&context, ClaimOf(kNs, "order-1", "worker-a"), &ignored);
  canceller.join();
  ASSERT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // The client's cancel is local at once; the server hears it over the
  // connection, well within this on loopback.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  Unblock();

  EXPECT_EQ(Query(QueryOf(kNs, "order-1")).record().state(), v1::STATE_ABSENT);
}

// Single node, execution left at auto: storage work runs on the gRPC
// thread, so a busy worker pool delays nothing. With fsync the answers
// come from the store's group sync (StoreOptions::group_sync), for unary
// calls, Batch and Stream alike.
class InlineExecutionTest : public WorkerLimitTest,
                            public ::testing::WithParamInterface<const char*> {
 protected:
  std::string Config() const override {
    return absl::StrCat("durability: \"", GetParam(), "\"", R"pb(
      workers: 1
      limits { max_queued_tasks: 1 }
    )pb");
  }
};

TEST_P(InlineExecutionTest, CallsAreAnsweredWhileEveryWorkerIsBusy) {
  BlockTheWorker();
  ASSERT_EQ(server_->server().pool()->Submit([] {}), WorkerPool::Admission::kQueued);

  EXPECT_EQ(Claim(ClaimOf(kNs, "order-1", "worker-a")).outcome(), v1::ClaimResponse::ACQUIRED);
  v1::BatchRequest batch;
  *batch.add_operations() = Op(QueryOf(kNs, "order-1"));
  const v1::BatchResponse answer = Batch(batch);
  ASSERT_EQ(answer.results_size(), 1);
  EXPECT_EQ(answer.results(0).query().record().state(), v1::STATE_IN_PROGRESS);

  std::unique_ptr<grpc::ClientContext> context = NewContext();
  auto stream = stub().Stream(context.get());
  ASSERT_TRUE(stream->Write(batch));
  v1::BatchResponse streamed;
  ASSERT_TRUE(stream->Read(&streamed));
  ASSERT_EQ(streamed.results_size(), 1);
  EXPECT_EQ(streamed.results(0).query().record().state(), v1::STATE_IN_PROGRESS);
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&streamed));
  EXPECT_THAT(stream->Finish(), IsOk());
  Unblock();
}

INSTANTIATE_TEST_SUITE_P(Durability, InlineExecutionTest, ::testing::Values("buffered", "fsync"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

class MessageLimitTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      default_policy { max_result_bytes: 200000 }
      limits { max_receive_message_bytes: 65536 max_batch_answer_bytes: 65536 }
    )pb";
  }
};

TEST_F(MessageLimitTest, ARequestOverTheMessageLimitIsRefused) {
  const uint64_t token = MustAcquire(kNs, "order-1", "worker-a");

  const grpc::Status status =
      StatusOf(stub(), CompleteOf(kNs, "order-1", token, std::string(70'000, 'r')));

  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_EQ(Complete(CompleteOf(kNs, "order-1", token, std::string(60'000, 'r'))).outcome(),
            v1::CompleteResponse::OK);
}

TEST_F(MessageLimitTest, ABatchAnswerStopsAtItsByteCapAndEachItemPastItSaysSo) {
  const uint64_t token = MustAcquire(kNs, "order-1", "worker-a");
  ASSERT_EQ(Complete(CompleteOf(kNs, "order-1", token, std::string(20'000, 'r'))).outcome(),
            v1::CompleteResponse::OK);
  v1::BatchRequest batch;
  for (int i = 0; i < 10; ++i) *batch.add_operations() = Op(QueryOf(kNs, "order-1"));
  *batch.add_operations() = Op(ClaimOf(kNs, "order-2", "worker-a"));

  const v1::BatchResponse response = Batch(batch);

  ASSERT_EQ(response.results_size(), 11);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(response.results(i).query().record().result().size(), 20'000u) << "item " << i;
  }
  for (int i = 3; i < 10; ++i) {
    EXPECT_EQ(response.results(i).error().code(),
              static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED))
        << "item " << i;
  }
  EXPECT_EQ(response.results(10).claim().outcome(), v1::ClaimResponse::ACQUIRED)
      << "a write past the cap is still applied and answered";
  EXPECT_LE(response.ByteSizeLong(), 65536u + 1024u);
}

// Two Stream calls at once on the whole server.
class OpenStreamLimitTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      limits { max_open_streams: 2 }
    )pb";
  }

  grpc::Status Open(OpenStream* open) { return OpenWithQuery(stub(), kNs, open); }

  static void Close(OpenStream* open) {
    open->stream->WritesDone();
    EXPECT_TRUE(open->stream->Finish().ok());
  }
};

TEST_F(OpenStreamLimitTest, AStreamPastTheBoundIsRefusedUntilOneCloses) {
  OpenStream first, second, third;
  ASSERT_TRUE(Open(&first).ok());
  ASSERT_TRUE(Open(&second).ok());

  const grpc::Status refused = Open(&third);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("limits.max_open_streams: 2"));
  // Unary calls are not Streams: they still answer.
  EXPECT_EQ(Query(QueryOf(kNs, "k")).record().state(), v1::STATE_ABSENT);

  Close(&first);
  // The slot is given back when the server has finished with the call,
  // just after the client sees it end.
  grpc::Status reopened;
  for (int attempt = 0; attempt < 100; ++attempt) {
    OpenStream retry;
    reopened = Open(&retry);
    if (reopened.ok()) {
      Close(&retry);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(reopened.ok()) << reopened.error_message();
  Close(&second);
}

// Connections asked to close after a second, with a second of grace.
class ConnectionAgeTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      limits { max_connection_age: "1s" max_connection_age_grace: "1s" }
    )pb";
  }
};

TEST_F(ConnectionAgeTest, AnOldConnectionIsClosedAndTheNextCallReconnects) {
  // A Stream outlives its connection's age and grace: the server ends it.
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub().Stream(context.get());
  v1::BatchRequest batch;
  *batch.add_operations() = Op(QueryOf(kNs, "k"));
  v1::BatchResponse response;
  ASSERT_TRUE(stream->Write(batch) && stream->Read(&response));
  const auto opened = std::chrono::steady_clock::now();
  EXPECT_FALSE(stream->Read(&response)) << "the server sent a message nobody asked for";
  const auto ended = std::chrono::steady_clock::now() - opened;
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_LT(ended, std::chrono::seconds(20)) << "ended by the connection's age, not the deadline";
  // The channel reconnects for the next call.
  EXPECT_EQ(Query(QueryOf(kNs, "k")).record().state(), v1::STATE_ABSENT);
}

}  // namespace
}  // namespace dedup::server::test
