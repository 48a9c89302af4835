// The data directory (design.md §5, §6): one dedupd at a time, and a shard
// count fixed when it is created.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {

using ::dedup::test::TempDir;
namespace {

using std::chrono::milliseconds;

constexpr char kNamespace[] = "data-dir";
constexpr milliseconds kExitTimeout{10'000};
constexpr milliseconds kShutdownTimeout{15'000};

// Claims and completes `key` with `result`; empty on success.
std::string ClaimAndComplete(DedupClient& client, const std::string& key,
                             const std::string& result) {
  v1::ClaimResponse claim;
  grpc::Status status = client.Claim(kNamespace, key, "worker", {}, &claim);
  if (!status.ok()) return "Claim failed: " + status.error_message();
  if (claim.outcome() != v1::ClaimResponse::ACQUIRED) return "Claim was not ACQUIRED";
  v1::CompleteResponse complete;
  status = client.Complete(kNamespace, key, claim.token(), result, &complete);
  if (!status.ok()) return "Complete failed: " + status.error_message();
  if (complete.outcome() != v1::CompleteResponse::OK) return "Complete was not OK";
  return "";
}

TEST(DataDirTest, SecondServerOnADataDirInUseExitsOneSayingSoAndFirstKeepsServing) {
  TempDir dir;
  const std::string data_dir = dir.Sub("data");
  absl::StatusOr<std::unique_ptr<ServingDedupd>> first = ServingDedupd::Start(dir.path(), data_dir);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(ClaimAndComplete((*first)->client(), "order-1", "shipped"), "");

  absl::StatusOr<FinishedRun> second =
      RunToExit({"--listen=127.0.0.1:0", "--metrics_listen=off",
                 "--port_file=" + dir.Sub("second-port"), "--data_dir=" + data_dir},
                dir.Sub("second.log"), kExitTimeout);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->status, ExitStatus::Exited(1)) << second->output;
  EXPECT_TRUE(absl::StrContains(second->output, "in use")) << second->output;

  // The refused server changed nothing under the first one.
  v1::Record record;
  ASSERT_TRUE((*first)->client().Query(kNamespace, "order-1", &record).ok());
  EXPECT_EQ(record.state(), v1::STATE_COMPLETED);
  EXPECT_EQ(record.result(), "shipped");
  EXPECT_EQ(ClaimAndComplete((*first)->client(), "order-2", "shipped too"), "");
  absl::StatusOr<ExitStatus> stopped = (*first)->process().Terminate(kShutdownTimeout);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << (*first)->process().Output();
}

// Two servers must never share a port: clients would be spread over both
// data directories, and a key would be "new" on each of them.
TEST(DataDirTest, SecondServerOnAPortInUseExitsOneSayingSoAndFirstKeepsServing) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<ServingDedupd>> first =
      ServingDedupd::Start(dir.path(), dir.Sub("first-data"));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string port = std::to_string((*first)->port());

  absl::StatusOr<FinishedRun> second =
      RunToExit({"--listen=127.0.0.1:" + port, "--metrics_listen=off",
                 "--port_file=" + dir.Sub("second-port"), "--data_dir=" + dir.Sub("second-data")},
                dir.Sub("second.log"), kExitTimeout);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->status, ExitStatus::Exited(1)) << second->output;
  EXPECT_TRUE(absl::StrContains(second->output, "cannot listen on 127.0.0.1:" + port))
      << second->output;

  EXPECT_EQ(ClaimAndComplete((*first)->client(), "order-1", "shipped"), "");
  absl::StatusOr<ExitStatus> stopped = (*first)->process().Terminate(kShutdownTimeout);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << (*first)->process().Output();
}

TEST(DataDirTest, RestartWithAnotherShardCountExitsOneNamingBothCounts) {
  TempDir dir;
  const std::string data_dir = dir.Sub("data");
  absl::StatusOr<std::unique_ptr<ServingDedupd>> created =
      ServingDedupd::Start(dir.path(), data_dir, {"--shards=4"});
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ(ClaimAndComplete((*created)->client(), "order-1", "shipped"), "");
  absl::StatusOr<ExitStatus> stopped = (*created)->process().Terminate(kShutdownTimeout);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  ASSERT_EQ(*stopped, ExitStatus::Exited(0));

  absl::StatusOr<FinishedRun> reshard =
      RunToExit({"--listen=127.0.0.1:0", "--metrics_listen=off",
                 "--port_file=" + dir.Sub("reshard-port"), "--data_dir=" + data_dir, "--shards=8"},
                dir.Sub("reshard.log"), kExitTimeout);
  ASSERT_TRUE(reshard.ok()) << reshard.status();
  EXPECT_EQ(reshard->status, ExitStatus::Exited(1)) << reshard->output;
  EXPECT_TRUE(absl::StrContains(reshard->output, "created with 4 shards")) << reshard->output;
  EXPECT_TRUE(absl::StrContains(reshard->output, "8")) << reshard->output;

  // Without --shards the directory opens with the count it was created
  // with, its data intact.
  absl::StatusOr<std::unique_ptr<ServingDedupd>> reopened =
      ServingDedupd::Start(dir.path(), data_dir);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  v1::Record record;
  ASSERT_TRUE((*reopened)->client().Query(kNamespace, "order-1", &record).ok());
  EXPECT_EQ(record.state(), v1::STATE_COMPLETED);
  EXPECT_EQ(record.result(), "shipped");
  stopped = (*reopened)->process().Terminate(kShutdownTimeout);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << (*reopened)->process().Output();
}

}  // namespace
}  // namespace dedup::blackbox
