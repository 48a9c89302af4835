// SIGTERM (design.md §6): dedupd drains in-flight calls, syncs and exits 0,
// and everything it acknowledged is there after a restart.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/blackbox/claim_complete_load.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {

using ::dedup::test::TempDir;
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kNamespace[] = "shutdown";
constexpr milliseconds kShutdownTimeout{15'000};  // The default grace is 10 s.

TEST(ShutdownTest, SigtermUnderLoadExitsZeroAndKeepsEveryAcknowledgedComplete) {
  TempDir dir;
  const std::string data_dir = dir.Sub("data");
  // Buffered, so that shutdown also stops the background WAL sync.
  const std::vector<std::string> flags = {"--durability=buffered"};
  absl::StatusOr<std::unique_ptr<ServingDedupd>> server =
      ServingDedupd::Start(dir.path(), data_dir, flags);
  ASSERT_TRUE(server.ok()) << server.status();

  v1::ClaimResponse claim;
  ASSERT_TRUE((*server)->client().Claim(kNamespace, "order-1", "worker", {}, &claim).ok());
  ASSERT_EQ(claim.outcome(), v1::ClaimResponse::ACQUIRED);
  v1::CompleteResponse complete;
  ASSERT_TRUE((*server)
                  ->client()
                  .Complete(kNamespace, "order-1", claim.token(), "shipped", &complete)
                  .ok());
  ASSERT_EQ(complete.outcome(), v1::CompleteResponse::OK);

  ClaimCompleteLoad::Options options;
  options.ns = kNamespace;
  options.writers = 4;
  ClaimCompleteLoad load((*server)->channel(), options);
  const Clock::time_point give_up = Clock::now() + milliseconds(3'000);
  while (load.acknowledged() < 200 && load.running() == options.writers && Clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  load.ExpectServerLoss();
  absl::StatusOr<ExitStatus> stopped = (*server)->process().Terminate(kShutdownTimeout);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << (*server)->process().Output();
  load.Join();
  EXPECT_TRUE(load.Unexpected().empty()) << FirstLines(load.Unexpected());
  // Calls the stopping server turns away fail as UNAVAILABLE (retry
  // elsewhere), or as CANCELLED when they reached it after shutdown began:
  // gRPC core cancels calls that no handler has picked up yet
  // (grpc/grpc#41785). Any other code means a call was broken mid-drain.
  for (const grpc::Status& status : load.Interruptions()) {
    EXPECT_TRUE(status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                status.error_code() == grpc::StatusCode::CANCELLED)
        << "a writer's call ended with code " << status.error_code() << ": "
        << status.error_message();
  }

  absl::StatusOr<std::unique_ptr<ServingDedupd>> restarted =
      ServingDedupd::Start(dir.path(), data_dir, flags);
  ASSERT_TRUE(restarted.ok()) << "restart after SIGTERM: " << restarted.status();
  v1::Record record;
  ASSERT_TRUE((*restarted)->client().Query(kNamespace, "order-1", &record).ok());
  EXPECT_EQ(record.state(), v1::STATE_COMPLETED);
  EXPECT_EQ(record.result(), "shipped");
  const std::vector<KeyLog> keys = load.Keys();
  const std::vector<std::string> lost =
      CheckCompletedReadBack((*restarted)->client(), kNamespace, keys);
  EXPECT_TRUE(lost.empty()) << FirstLines(lost);

  stopped = (*restarted)->process().Terminate(kShutdownTimeout);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << (*restarted)->process().Output();
}

TEST(ShutdownTest, SigtermWhenIdleExitsZeroPromptly) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<ServingDedupd>> server =
      ServingDedupd::Start(dir.path(), dir.Sub("data"));
  ASSERT_TRUE(server.ok()) << server.status();
  // Nothing is in flight, so nothing is waited for: well under the grace.
  absl::StatusOr<ExitStatus> stopped = (*server)->process().Terminate(milliseconds(5'000));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << (*server)->process().Output();
}

}  // namespace
}  // namespace dedup::blackbox
