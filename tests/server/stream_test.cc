// Stream: pipelined batches on one bidirectional call; every batch is
// answered exactly once, tagged with its batch_id (design.md §4).

#include <atomic>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/clock.h"
#include "tests/common/fault_injection_file_system.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "events";

using StreamTest = ServerTest;

// A Stream call whose answers are collected by a reader thread while the
// test writes, so writing never waits on reading.
class StreamCall {
 public:
  explicit StreamCall(v1::Dedup::Stub& stub)
      : context_(NewContext()), stream_(stub.Stream(context_.get())) {
    reader_ = std::thread([this] {
      v1::BatchResponse response;
      while (stream_->Read(&response)) {
        answers_.push_back(response);
        answered_.fetch_add(1);
      }
    });
  }

  // A test that stopped early cancels the call so the reader ends.
  ~StreamCall() {
    if (!reader_.joinable()) return;
    context_->TryCancel();
    reader_.join();
  }

  bool Write(const v1::BatchRequest& request) { return stream_->Write(request); }

  // Waits until `n` answers have arrived, or 10 s; returns whether they did.
  bool AwaitAnswers(int n) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (answered_.load() < n) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  // Half-closes, waits for every answer and returns how the call ended.
  grpc::Status Close() {
    stream_->WritesDone();
    reader_.join();
    return stream_->Finish();
  }

  // Valid after Close.
  const std::vector<v1::BatchResponse>& answers() const { return answers_; }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>> stream_;
  std::vector<v1::BatchResponse> answers_;  // Written by reader_ only.
  std::atomic<int> answered_{0};
  std::thread reader_;
};

// Batch `id` claims event-<id> twice (two owners) and queries it.
v1::BatchRequest ClaimTwiceAndQuery(uint64_t id) {
  const std::string key = absl::StrCat("event-", id);
  v1::BatchRequest request;
  request.set_batch_id(id);
  *request.add_operations() = Op(ClaimOf(kNs, key, absl::StrCat("owner-", id)));
  *request.add_operations() = Op(ClaimOf(kNs, key, "someone-else"));
  *request.add_operations() = Op(QueryOf(kNs, key));
  return request;
}

TEST_F(StreamTest, EveryPipelinedBatchIsAnsweredExactlyOnceWithItsOwnResults) {
  // More batches than the server runs at once, so reading pauses and resumes.
  constexpr uint64_t kBatches = 100;
  StreamCall call(stub());
  for (uint64_t id = 1; id <= kBatches; ++id) {
    ASSERT_TRUE(call.Write(ClaimTwiceAndQuery(id))) << "batch " << id;
  }
  ASSERT_THAT(call.Close(), IsOk());

  std::map<uint64_t, int> times_answered;
  for (const v1::BatchResponse& answer : call.answers()) {
    ++times_answered[answer.batch_id()];
    const uint64_t id = answer.batch_id();
    ASSERT_EQ(answer.results_size(), 3) << "batch " << id;
    EXPECT_EQ(answer.results(0).claim().outcome(), v1::ClaimResponse::ACQUIRED) << "batch " << id;
    EXPECT_EQ(answer.results(1).claim().outcome(), v1::ClaimResponse::IN_PROGRESS)
        << "batch " << id;
    EXPECT_EQ(answer.results(1).claim().holder(), absl::StrCat("owner-", id)) << "batch " << id;
    EXPECT_EQ(answer.results(2).query().record().key(), absl::StrCat("event-", id))
        << "batch " << id;
    EXPECT_EQ(answer.results(2).query().record().owner(), absl::StrCat("owner-", id))
        << "batch " << id;
  }
  EXPECT_EQ(call.answers().size(), kBatches);
  ASSERT_EQ(times_answered.size(), kBatches);
  for (const auto& [id, times] : times_answered) {
    EXPECT_TRUE(id >= 1 && id <= kBatches) << "unexpected batch_id " << id;
    EXPECT_EQ(times, 1) << "batch " << id;
  }
}

// Regression (found by ThreadSanitizer): a worker that answered a stream's
// last batch used to lock the reactor's mutex once more after another
// thread could already have finished the call and gRPC deleted the
// reactor. The window is narrow; many short streams ending while their last
// answers are handed over make it likely, and a sanitizer build
// (deploy/build-tsan.sh, deploy/build-sanitizers.sh) reports the use after
// free. In any build, every stream must end OK with all its answers.
TEST_F(StreamTest, ShortStreamsEndingWhileTheirLastAnswersAreHandedOverEndCleanly) {
  constexpr int kThreads = 4;
  constexpr int kStreamsPerThread = 40;
  constexpr uint64_t kBatches = 3;
  std::vector<std::thread> threads;
  std::vector<int> clean(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, &clean] {
      for (int s = 0; s < kStreamsPerThread; ++s) {
        StreamCall call(stub());
        bool written = true;
        for (uint64_t b = 1; b <= kBatches; ++b) {
          written = written && call.Write(ClaimTwiceAndQuery((t * 1000 + s) * 10 + b));
        }
        const grpc::Status status = call.Close();
        if (written && status.ok() && call.answers().size() == kBatches) ++clean[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(clean[t], kStreamsPerThread) << "thread " << t;
}

// A client holds its Stream open for as long as it likes. A server closing
// its Streams (as it does on shutdown) answers the batches each has read,
// then ends it UNAVAILABLE, so the client knows to send the rest again;
// a Stream opened afterwards ends at once.
TEST_F(StreamTest, ClosedStreamsEndUnavailableAfterAnsweringWhatTheyRead) {
  StreamCall first(stub());
  StreamCall second(stub());
  ASSERT_TRUE(first.Write(ClaimTwiceAndQuery(1)));
  ASSERT_TRUE(second.Write(ClaimTwiceAndQuery(2)));
  ASSERT_TRUE(second.Write(ClaimTwiceAndQuery(3)));
  // Both are open on the server, each waiting for its next batch.
  ASSERT_TRUE(first.AwaitAnswers(1));
  ASSERT_TRUE(second.AwaitAnswers(2));

  server_->server().service()->CloseStreams();

  const std::string closed = "dedupd is shutting down";
  EXPECT_THAT(first.Close(), IsErrorNaming(grpc::StatusCode::UNAVAILABLE, closed));
  EXPECT_EQ(first.answers().size(), 1u);
  EXPECT_THAT(second.Close(), IsErrorNaming(grpc::StatusCode::UNAVAILABLE, closed));
  EXPECT_EQ(second.answers().size(), 2u);
  StreamCall late(stub());
  late.Write(ClaimTwiceAndQuery(4));
  EXPECT_THAT(late.Close(), IsErrorNaming(grpc::StatusCode::UNAVAILABLE, closed));
  EXPECT_TRUE(late.answers().empty());
  // Unary calls are still served until the server stops.
  EXPECT_EQ(Claim(ClaimOf(kNs, "event-5", "worker")).outcome(), v1::ClaimResponse::ACQUIRED);
}

// Shutdown ends an open Stream itself instead of waiting out its grace
// and then cancelling it.
TEST_F(StreamTest, ShutdownEndsAnOpenStreamUnavailable) {
  StreamCall call(stub());
  ASSERT_TRUE(call.Write(ClaimTwiceAndQuery(1)));
  ASSERT_TRUE(call.AwaitAnswers(1));

  const absl::Time start = absl::Now();
  server_->server().Shutdown(absl::Seconds(20));
  std::cout << "shutdown took " << absl::FormatDuration(absl::Now() - start) << "\n";

  EXPECT_THAT(call.Close(),
              IsErrorNaming(grpc::StatusCode::UNAVAILABLE, "dedupd is shutting down"));
  EXPECT_EQ(call.answers().size(), 1u);
}

TEST_F(StreamTest, BadItemInAStreamedBatchGetsItsOwnError) {
  v1::BatchRequest request;
  request.set_batch_id(5);
  *request.add_operations() = Op(ClaimOf(kNs, "event-1", "worker-a"));
  *request.add_operations() = Op(ClaimOf(kNs, "event-2", ""));

  StreamCall call(stub());
  ASSERT_TRUE(call.Write(request));
  ASSERT_THAT(call.Close(), IsOk());

  ASSERT_EQ(call.answers().size(), 1u);
  const v1::BatchResponse& answer = call.answers()[0];
  EXPECT_EQ(answer.batch_id(), 5u);
  ASSERT_EQ(answer.results_size(), 2);
  EXPECT_EQ(answer.results(0).claim().outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(answer.results(1).error().code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(StreamTest, StreamWithNoBatchesEndsOk) {
  StreamCall call(stub());

  EXPECT_THAT(call.Close(), IsOk());
  EXPECT_TRUE(call.answers().empty());
}

TEST_F(StreamTest, OversizedBatchEndsTheStreamWithInvalidArgument) {
  v1::BatchRequest request;
  for (int i = 0; i <= kMaxBatchOperations; ++i) {
    *request.add_operations() = Op(QueryOf(kNs, absl::StrCat("event-", i)));
  }

  StreamCall call(stub());
  call.Write(request);

  EXPECT_THAT(call.Close(), IsInvalidArgumentNaming("operations"));
}

// With fsync and inline execution the store syncs in groups: a batch is
// answered only once a sync covers it. A failed sync must end the stream
// with the error, and not answer the batch it covered.
TEST(StreamGroupSyncTest, AFailedSyncEndsTheStreamWithoutAnsweringItsBatch) {
  storage::ManualClock clock(kStartMs);
  auto [fs, env] = dedup::test::FaultInjectionFileSystem::Make();
  absl::StatusOr<std::unique_ptr<TestServer>> server =
      TestServer::Start(R"pb(durability: "fsync" execution: "inline")pb", &clock, env);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->server().store()->SyncsInGroups());
  v1::Dedup::Stub& stub = (*server)->stub();
  v1::ClaimResponse claimed;
  auto claim_context = NewContext();
  ASSERT_THAT(stub.Claim(claim_context.get(), ClaimOf(kNs, "event-1", "owner-1"), &claimed),
              IsOk());
  ASSERT_EQ(claimed.outcome(), v1::ClaimResponse::ACQUIRED);
  const uint64_t token = claimed.token();

  fs->FailSyncs();
  StreamCall call(stub);
  v1::BatchRequest complete;
  complete.set_batch_id(7);
  *complete.add_operations() = Op(CompleteOf(kNs, "event-1", token, "receipt"));
  call.Write(complete);

  EXPECT_EQ(call.Close().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(call.answers().empty()) << "a batch was answered although its sync failed";
  // Nor does a later reader learn of the completion that was never synced.
  v1::QueryResponse query;
  auto context = NewContext();
  EXPECT_EQ(stub.Query(context.get(), QueryOf(kNs, "event-1"), &query).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace dedup::server::test
