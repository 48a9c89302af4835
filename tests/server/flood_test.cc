// Memory floods (design.md §10): a client that never reads its Stream, and
// many parallel Batches asking for far more than a message can carry, leave
// the server's resident memory within a stated bound while other clients
// are still served.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/memory_release.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kNs[] = "floods";
constexpr char kBigKey[] = "big";
constexpr size_t kResultBytes = 64 * 1024;
// Growth of this test process's resident memory that a flood may cause. The
// server and its clients are both in it: a 3 MiB Batch answer exists as
// storage's answers, the response, gRPC's serialized copy and the client's
// copies, 32 at once. Without backpressure and the answer cap, the stream
// flood below asks for 10,000 x 6.4 MiB and the batches for 32 x 64 MiB.
constexpr int64_t kRssBoundBytes = 256 << 20;
// The 32 parallel Batches hold up to five copies of a 3 MiB answer each at
// once (480 MiB), and glibc's per-thread arenas keep some of what was
// freed: their peak growth measured 256 to 308 MiB. Without the answer cap
// they would hold 32 x 64 MiB, far above this.
constexpr int64_t kParallelRssBoundBytes = 384 << 20;

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

class FloodTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      default_policy { max_result_bytes: 65536 }
    )pb";
  }

  void SetUp() override {
    ServerTest::SetUp();
    const uint64_t token = MustAcquire(kNs, kBigKey, "worker-a");
    ASSERT_EQ(Complete(CompleteOf(kNs, kBigKey, token, std::string(kResultBytes, 'r'))).outcome(),
              v1::CompleteResponse::OK);
  }

  static v1::BatchRequest QueriesOfTheBigKey(int n) {
    v1::BatchRequest batch;
    for (int i = 0; i < n; ++i) *batch.add_operations() = Op(QueryOf(kNs, kBigKey));
    return batch;
  }

  // A second client on a connection of its own (the channel argument keeps
  // gRPC from sharing the flooded connection).
  std::unique_ptr<v1::Dedup::Stub> SecondClient() {
    grpc::ChannelArguments args;
    args.SetInt("dedup.test.second_client", 1);
    return v1::Dedup::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->server().port()),
                                  grpc::InsecureChannelCredentials(), args));
  }
};

TEST_F(FloodTest, AStreamNeverReadStaysWithinTheMemoryBoundAndOthersAreServed) {
  constexpr int kBatches = 10'000;
  const v1::BatchRequest batch = QueriesOfTheBigKey(100);
  const int64_t baseline = ResidentBytes();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub().Stream(&context);
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; i < kBatches && stream->Write(batch); ++i) ++written;
  });

  // Until the writer is blocked (the server stopped reading) for a second,
  // or has written everything; the call is cancelled as soon as the bound
  // is crossed, so a failure does not take the machine's memory.
  int64_t peak = 0;
  int last = -1;
  Clock::time_point last_progress = Clock::now();
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(30);
  while (written < kBatches && Clock::now() - last_progress < std::chrono::seconds(1) &&
         Clock::now() < give_up) {
    peak = std::max(peak, ResidentBytes() - baseline);
    if (peak > kRssBoundBytes) break;
    if (written != last) {
      last = written;
      last_progress = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int written_while_open = written;

  grpc::ClientContext claim_context;
  claim_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  v1::ClaimResponse claim;
  const grpc::Status claimed =
      SecondClient()->Claim(&claim_context, ClaimOf(kNs, "other", "worker-b"), &claim);
  peak = std::max(peak, ResidentBytes() - baseline);

  context.TryCancel();
  writer.join();
  stream->Finish();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t after = ResidentBytes() - baseline;

  EXPECT_LE(peak, kRssBoundBytes) << "MiB of growth: " << (peak >> 20) << " after "
                                  << written_while_open << " batches written";
  EXPECT_LE(after, kRssBoundBytes) << "after the stream closed";
  EXPECT_TRUE(claimed.ok()) << claimed.error_code() << " " << claimed.error_message();
  EXPECT_EQ(claim.outcome(), v1::ClaimResponse::ACQUIRED);
  std::cout << "stream flood: " << written_while_open << " of " << kBatches
            << " batches written before the server stopped reading; peak growth " << (peak >> 20)
            << " MiB, after close " << (after >> 20) << " MiB\n";
}

TEST_F(FloodTest, ParallelBigBatchesAnswerResourceExhaustedWhereTheCapBitesAndStayBounded) {
  constexpr int kParallel = 32;
  const v1::BatchRequest batch = QueriesOfTheBigKey(1000);
  const int64_t baseline = ResidentBytes();
  std::atomic<int64_t> peak{0};
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done) {
      peak = std::max<int64_t>(peak, ResidentBytes() - baseline);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  std::vector<v1::BatchResponse> responses(kParallel);
  std::vector<grpc::Status> statuses(kParallel);
  std::vector<std::thread> clients;
  for (int c = 0; c < kParallel; ++c) {
    clients.emplace_back([&, c] {
      std::unique_ptr<grpc::ClientContext> context = NewContext();
      statuses[c] = stub().Batch(context.get(), batch, &responses[c]);
    });
  }
  for (std::thread& t : clients) t.join();
  done = true;
  sampler.join();

  for (int c = 0; c < kParallel; ++c) {
    ASSERT_TRUE(statuses[c].ok()) << statuses[c].error_message();
    ASSERT_EQ(responses[c].results_size(), 1000);
    int answered = 0, exhausted = 0;
    for (const v1::OperationResult& result : responses[c].results()) {
      if (result.has_query()) ++answered;
      if (result.error().code() == static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)) {
        ++exhausted;
      }
    }
    // Each answered record is its key, owner and result: 3 + 8 + 64 KiB
    // bytes, 47 of them within the default cap of 3 MiB.
    EXPECT_EQ(answered, (3 << 20) / static_cast<int>(3 + 8 + kResultBytes)) << "client " << c;
    EXPECT_EQ(answered + exhausted, 1000) << "client " << c;
  }
  EXPECT_LE(peak, kParallelRssBoundBytes) << "MiB of growth: " << (peak >> 20);
  std::cout << "parallel batches: peak growth " << (peak >> 20) << " MiB\n";
}

TEST(MemoryReleaseTest, ReleasesOnceEnoughWasFreedAndNotBefore) {
  std::atomic<int> calls{0};
  MemoryRelease release([&] { ++calls; }, {/*threshold=*/1000, absl::Milliseconds(1)});
  release.Freed(999);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls.load(), 0);
  release.Freed(1);
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(5);
  while (calls.load() < 1 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(calls.load(), 1);
  // What was noted is counted from the release on.
  release.Freed(999);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(release.releases(), 1u);
}

TEST(MemoryReleaseTest, WithoutAReleaseNothingRuns) {
  MemoryRelease release(nullptr, {});
  release.Freed(uint64_t{1} << 40);
  EXPECT_EQ(release.releases(), 0u);
}

}  // namespace
}  // namespace dedup::server::test
