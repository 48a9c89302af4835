// What open Streams can make dedupd hold (design.md §10), measured from the
// server process's resident memory in /proc: every Stream slot taken
// (limits.max_open_streams, 128 by default) by a client that writes batches
// whose answers are as large as a message may carry and never reads them.
// The growth must stay within the bound README states per Stream, and the
// memory must be handed back to the system once the Streams are gone.
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {

using ::dedup::test::TempDir;
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kNamespace[] = "streams";
constexpr char kBigKey[] = "big";
// The default policy's largest result.
constexpr size_t kResultBytes = 64 * 1024;
// limits.max_open_streams by default.
constexpr int kStreams = 128;
// What README ("Security", memory) states one Stream can make the server
// hold at the default limits: max_stream_answer_bytes (8 MiB), which counts
// requests read, answers waiting and gRPC's encoded copy of the one being
// written; the batch read last and its answer past it (up to 3 MiB here);
// gRPC's read-ahead of requests not yet read (1 MiB); and what the
// allocator rounds up (a 64 KiB result takes 80 KiB). Measured: 14.2 to
// 14.8 MiB.
constexpr int64_t kBytesPerStream = 20LL << 20;
// Resident memory the server may keep once every Stream is gone: what it
// held at the baseline comes back, and allocator caches hold a little.
constexpr int64_t kKeptBytes = 64LL << 20;

// VmRSS of `pid`, in bytes; 0 if it cannot be read.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string field;
  while (status >> field) {
    if (field == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

// The largest resident size over `window`, sampled every 20 ms.
int64_t PeakOver(pid_t pid, milliseconds window) {
  int64_t peak = 0;
  for (const Clock::time_point end = Clock::now() + window; Clock::now() < end;) {
    peak = std::max(peak, ResidentBytes(pid));
    std::this_thread::sleep_for(milliseconds(20));
  }
  return peak;
}

// Claims and completes the record whose result every Query below reads.
void StoreTheBigRecord(DedupClient& client) {
  v1::ClaimResponse claim;
  ASSERT_TRUE(client.Claim(kNamespace, kBigKey, "worker", {}, &claim).ok());
  ASSERT_EQ(claim.outcome(), v1::ClaimResponse::ACQUIRED);
  v1::CompleteResponse complete;
  ASSERT_TRUE(
      client.Complete(kNamespace, kBigKey, claim.token(), std::string(kResultBytes, 'r'), &complete)
          .ok());
  ASSERT_EQ(complete.outcome(), v1::CompleteResponse::OK);
}

// 100 Queries of the big record: 47 records fill an answer
// (max_batch_answer_bytes), the others are refused in it.
v1::BatchRequest QueriesOfTheBigRecord() {
  v1::BatchRequest batch;
  for (int i = 0; i < 100; ++i) {
    v1::QueryRequest* query = batch.add_operations()->mutable_query();
    query->set_namespace_(kNamespace);
    query->set_key(kBigKey);
  }
  return batch;
}

// A Stream that writes batches of Queries of the big record, each answer
// reaching max_batch_answer_bytes, and never reads.
struct UnreadStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>> stream;
  std::atomic<int> written{0};
  std::thread writer;
};

TEST(StreamMemoryTest, EveryStreamSlotUnreadStaysWithinTheStatedBoundAndIsGivenBack) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<ServingDedupd>> server =
      ServingDedupd::Start(dir.path(), dir.Sub("data"));
  ASSERT_TRUE(server.ok()) << server.status();
  const pid_t pid = (*server)->process().pid();

  ASSERT_NO_FATAL_FAILURE(StoreTheBigRecord((*server)->client()));
  const v1::BatchRequest batch = QueriesOfTheBigRecord();
  // Connections of their own (gRPC would share one otherwise), each under
  // limits.max_concurrent_streams.
  std::vector<std::unique_ptr<v1::Dedup::Stub>> stubs;
  for (int c = 0; c < 4; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("dedup.test.connection", c);
    // Nor does the client take answers ahead beyond gRPC's initial window:
    // a client that never reads holds little, the server the rest.
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    stubs.push_back(v1::Dedup::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials(), args)));
  }

  // One Stream read in full first, so that gRPC's and the store's start-up
  // allocations are in the baseline.
  {
    grpc::ClientContext context;
    auto stream = stubs[0]->Stream(&context);
    ASSERT_TRUE(stream->Write(batch));
    v1::BatchResponse answer;
    ASSERT_TRUE(stream->Read(&answer));
    stream->WritesDone();
    ASSERT_TRUE(stream->Finish().ok());
  }
  std::this_thread::sleep_for(milliseconds(500));
  const int64_t baseline = ResidentBytes(pid);
  ASSERT_GT(baseline, 0);

  std::vector<std::unique_ptr<UnreadStream>> streams;
  for (int s = 0; s < kStreams; ++s) {
    auto open = std::make_unique<UnreadStream>();
    open->stream = stubs[s % stubs.size()]->Stream(&open->context);
    UnreadStream* raw = open.get();
    open->writer = std::thread([raw, &batch] {
      while (raw->stream->Write(batch)) ++raw->written;
    });
    streams.push_back(std::move(open));
  }

  // Until the server has stopped reading every Stream: no batch written
  // anywhere for 2 s.
  int64_t peak = 0;
  int last_total = -1;
  Clock::time_point last_progress = Clock::now();
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() - last_progress < std::chrono::seconds(2) && Clock::now() < give_up) {
    peak = std::max(peak, PeakOver(pid, milliseconds(200)));
    int total = 0;
    for (const auto& open : streams) total += open->written;
    if (total != last_total) {
      last_total = total;
      last_progress = Clock::now();
    }
  }
  peak = std::max(peak, PeakOver(pid, milliseconds(500)));

  // One more Stream is refused: the slots are all taken.
  {
    grpc::ClientContext context;
    auto stream = stubs[0]->Stream(&context);
    stream->Write(batch);
    v1::BatchResponse answer;
    EXPECT_FALSE(stream->Read(&answer));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  for (auto& open : streams) open->context.TryCancel();
  for (auto& open : streams) {
    open->writer.join();
    open->stream->Finish();
  }
  streams.clear();
  // The allocator hands memory back within a second or two of the last
  // Stream's end.
  int64_t after = ResidentBytes(pid);
  for (const Clock::time_point end = Clock::now() + std::chrono::seconds(5);
       after - baseline > kKeptBytes && Clock::now() < end;) {
    std::this_thread::sleep_for(milliseconds(100));
    after = ResidentBytes(pid);
  }

  const int64_t growth = peak - baseline;
  std::printf(
      "[ measured ] %d unread Streams of %zu KiB answers (%d batches written in all): server "
      "resident memory grew by %lld MiB, %.1f MiB per Stream (bound %lld MiB); %lld MiB above "
      "the baseline once they were gone\n",
      kStreams, kResultBytes >> 10, last_total, static_cast<long long>(growth >> 20),
      static_cast<double>(growth) / kStreams / (1 << 20),
      static_cast<long long>(kBytesPerStream >> 20),
      static_cast<long long>((after - baseline) >> 20));
  EXPECT_LE(growth, kStreams * kBytesPerStream) << "MiB: " << (growth >> 20);
  EXPECT_LE(after - baseline, kKeptBytes) << "MiB kept: " << ((after - baseline) >> 20);
}

// gRPC reads ahead of a call that is not reading, up to the call's HTTP/2
// window. dedupd keeps that window at 1 MiB: with gRPC's growth of windows
// (BDP probing) a Stream that paused kept taking requests, 13,000 batches
// of 100 Queries each on average in 128 such Streams, 2.9 GiB in all.
TEST(StreamMemoryTest, APausedStreamTakesOnlyItsReadAheadOfRequests) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<ServingDedupd>> server =
      ServingDedupd::Start(dir.path(), dir.Sub("data"));
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NO_FATAL_FAILURE(StoreTheBigRecord((*server)->client()));
  const v1::BatchRequest batch = QueriesOfTheBigRecord();
  // A client with gRPC's defaults, which never reads.
  auto stub = v1::Dedup::NewStub((*server)->channel());
  UnreadStream open;
  open.stream = stub->Stream(&open.context);
  open.writer = std::thread([&open, &batch] {
    while (open.stream->Write(batch)) ++open.written;
  });
  int last = -1;
  Clock::time_point last_progress = Clock::now();
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() - last_progress < std::chrono::seconds(1) && Clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(50));
    if (open.written != last) {
      last = open.written;
      last_progress = Clock::now();
    }
  }
  open.context.TryCancel();
  open.writer.join();
  open.stream->Finish();

  const int64_t written_bytes = static_cast<int64_t>(last) * batch.ByteSizeLong();
  std::printf(
      "[ measured ] a Stream that is not read took %d batches (%lld KiB) before writes "
      "blocked\n",
      last, static_cast<long long>(written_bytes >> 10));
  // The read-ahead (1 MiB), what the server read before it paused (its
  // budget of 8 MiB holds three answers), and the client's own buffers.
  EXPECT_LE(written_bytes, 3 << 20);
}

}  // namespace
}  // namespace dedup::blackbox
