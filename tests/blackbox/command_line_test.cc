// Flags and the config file (design.md §6): bad ones exit 2 naming the
// offending field before anything is opened; --help and --check_config
// exit 0.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {

using ::dedup::test::TempDir;
namespace {

constexpr std::chrono::milliseconds kExitTimeout{10'000};

class CommandLineTest : public ::testing::Test {
 protected:
  // Runs dedupd with `flags` until it exits. It is always pointed at this
  // test's own address, port file and data directory, so that even a
  // wrongly accepted config touches nothing outside the test.
  FinishedRun Run(const std::vector<std::string>& flags) {
    std::vector<std::string> all = {"--listen=127.0.0.1:0", "--metrics_listen=off",
                                    "--port_file=" + dir_.Sub("port"), "--data_dir=" + data_dir()};
    all.insert(all.end(), flags.begin(), flags.end());
    absl::StatusOr<FinishedRun> run = RunToExit(all, dir_.Sub("dedupd.log"), kExitTimeout);
    EXPECT_TRUE(run.ok()) << run.status();
    if (run.ok()) return *run;
    // RunToExit killed it: report that, so the test's own checks fail too.
    return FinishedRun{ExitStatus::Signaled(SIGKILL), run.status().ToString()};
  }

  // Writes `text` as a config file and returns its --config flag.
  std::string ConfigFlag(const std::string& text) {
    WriteFile(dir_.Sub("dedupd.textproto"), text);
    return "--config=" + dir_.Sub("dedupd.textproto");
  }

  std::string data_dir() const { return dir_.Sub("data"); }
  bool DataDirExists() const { return std::filesystem::exists(data_dir()); }

  TempDir dir_;
};

TEST_F(CommandLineTest, HelpExitsZeroAndDescribesTheDataDirFlag) {
  const FinishedRun run = Run({"--help"});
  EXPECT_EQ(run.status, ExitStatus::Exited(0)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--data_dir")) << run.output;
  EXPECT_FALSE(DataDirExists());
}

TEST_F(CommandLineTest, CheckConfigAcceptsAValidConfigWithoutOpeningTheDataDir) {
  const FinishedRun run =
      Run({"--check_config", ConfigFlag(R"pb(
             shards: 8
             durability: "buffered"
             buffered_sync_interval: "50ms"
             default_policy { lease_default: "20s" retention_floor: "2h" retention_default: "48h" }
             namespaces {
               name: "coupon-deduct"
               policy { lease_max: "5m" max_attempts: 3 }
             }
             namespaces { name: "payment.callback_v2" }
           )pb")});
  EXPECT_EQ(run.status, ExitStatus::Exited(0)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "configuration OK")) << run.output;
  EXPECT_FALSE(DataDirExists()) << "--check_config must not create the data directory";
}

TEST_F(CommandLineTest, UnknownDurabilityInConfigExitsTwoNamingTheField) {
  const FinishedRun run = Run({ConfigFlag("durability: \"sometimes\"\n")});
  EXPECT_EQ(run.status, ExitStatus::Exited(2)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "durability")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "sometimes")) << run.output;
  EXPECT_FALSE(DataDirExists()) << "a bad config must not touch the data directory";
}

TEST_F(CommandLineTest, UnknownDurabilityFlagExitsTwoNamingIt) {
  const FinishedRun run = Run({"--durability=sometimes"});
  EXPECT_EQ(run.status, ExitStatus::Exited(2)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "durability")) << run.output;
  EXPECT_FALSE(DataDirExists());
}

TEST_F(CommandLineTest, InvalidNamespaceNameExitsTwoNamingItsPosition) {
  const FinishedRun run = Run({ConfigFlag(R"pb(
    namespaces { name: "coupon-deduct" }
    namespaces { name: "Payment Callback" }
  )pb")});
  EXPECT_EQ(run.status, ExitStatus::Exited(2)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "namespaces[1].name")) << run.output;
  EXPECT_FALSE(DataDirExists());
}

TEST_F(CommandLineTest, InvalidPolicyDurationExitsTwoNamingTheField) {
  const FinishedRun run =
      Run({ConfigFlag("namespaces { name: \"coupons\" policy { lease_max: \"forever\" } }\n")});
  EXPECT_EQ(run.status, ExitStatus::Exited(2)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "namespaces[0].policy.lease_max")) << run.output;
  EXPECT_FALSE(DataDirExists());
}

TEST_F(CommandLineTest, UnparsableConfigExitsTwoNamingTheLine) {
  const FinishedRun run =
      Run({ConfigFlag("shards: 4\n"
                      "durability: \"fsync\"\n"
                      "lease_default: \"30s\"\n")});  // A policy field, not a server one.
  EXPECT_EQ(run.status, ExitStatus::Exited(2)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "line 3")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "lease_default")) << run.output;
  EXPECT_FALSE(DataDirExists());
}

TEST_F(CommandLineTest, MissingConfigFileExitsTwoNamingThePath) {
  const std::string missing = dir_.Sub("no-such.textproto");
  const FinishedRun run = Run({"--config=" + missing});
  EXPECT_EQ(run.status, ExitStatus::Exited(2)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, missing)) << run.output;
  EXPECT_FALSE(DataDirExists());
}

// --help documents "2 bad flags or config, 1 cannot start": a supervisor
// restarts on 1 and gives up on 2.
TEST_F(CommandLineTest, UnknownFlagExitsTwoAsBadFlagsDo) {
  const FinishedRun run = Run({"--no_such_flag=1"});
  EXPECT_EQ(run.status, ExitStatus::Exited(2)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "no_such_flag")) << run.output;
  EXPECT_FALSE(DataDirExists());
}

}  // namespace
}  // namespace dedup::blackbox

namespace dedup::blackbox {
namespace {

// Refused while reading the configuration, before anything listens: a
// later --listen overrides the test's loopback one.
TEST_F(CommandLineTest, PlaintextOnANonLoopbackAddressIsRefusedWithoutInsecure) {
  const FinishedRun run = Run({"--listen=0.0.0.0:0"});

  EXPECT_EQ(run.status, ExitStatus::Exited(2)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "0.0.0.0:0 is not a loopback address")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--insecure")) << run.output;
  EXPECT_FALSE(DataDirExists());
}

TEST_F(CommandLineTest, InsecureAcknowledgesPlaintextAndCheckConfigSaysSo) {
  const FinishedRun run = Run({"--listen=0.0.0.0:0", "--insecure", "--check_config"});

  EXPECT_EQ(run.status, ExitStatus::Exited(0)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "grpc_transport=plaintext-insecure")) << run.output;
}

}  // namespace
}  // namespace dedup::blackbox
