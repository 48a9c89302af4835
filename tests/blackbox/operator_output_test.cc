// What the binaries print for operators: --version from the build info, and
// --log_format=json lines that log pipelines can parse, naming keys only by
// their hash unless --log_keys is set.

#include <stdio.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "dedup/build_info.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/key_codec.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {
namespace {

using ::dedup::test::TempDir;
using Json = nlohmann::json;

constexpr char kNamespace[] = "payment-callback";
constexpr char kKey[] = "order-4711";
constexpr std::chrono::milliseconds kTimeout{10'000};

// Runs `command` through the shell; its stdout, and its exit code.
std::pair<std::string, int> RunCommand(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {"", -1};
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// The log of a dedupd in which one lease was taken over, one JSON value per
// line (or a parse error in `problems`).
std::vector<Json> TakeoverLog(const std::vector<std::string>& extra_flags,
                              std::vector<std::string>* problems) {
  TempDir dir;
  std::vector<std::string> flags = {"--log_format=json", "--metrics_listen=off"};
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  auto server = ServingDedupd::Start(dir.path(), dir.Sub("data"), flags);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return {};
  v1::ClaimResponse first;
  EXPECT_TRUE((*server)->client().Claim(kNamespace, kKey, "worker-a", 50, &first).ok());
  // The lease must really run out: this is another process's clock.
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  v1::ClaimResponse second;
  EXPECT_TRUE((*server)->client().Claim(kNamespace, kKey, "worker-b", 50, &second).ok());
  EXPECT_EQ(second.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_TRUE(second.takeover());
  auto stopped = (*server)->process().Terminate(kTimeout);
  EXPECT_TRUE(stopped.ok()) << stopped.status();
  std::vector<Json> lines;
  for (absl::string_view line : absl::StrSplit((*server)->process().Output(), '\n')) {
    if (line.empty()) continue;
    Json value = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded() || !value.is_object()) {
      problems->push_back(std::string(line));
    } else {
      lines.push_back(std::move(value));
    }
  }
  return lines;
}

const Json* Event(const std::vector<Json>& lines, const std::string& message) {
  for (const Json& line : lines) {
    if (line.value("message", "") == message) return &line;
  }
  return nullptr;
}

TEST(OperatorOutputTest, DedupdVersionPrintsTheBuildVersion) {
  const auto [out, code] = RunCommand(absl::StrFormat("'%s' --version", DEDUPD_PATH));
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, absl::StrFormat("dedupd %s\n", kVersion));
}

TEST(OperatorOutputTest, DedupctlVersionPrintsTheSameBuildVersion) {
  const auto [out, code] = RunCommand(absl::StrFormat("'%s' --version", DEDUPCTL_PATH));
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, absl::StrFormat("dedupctl %s\n", kVersion));
}

TEST(OperatorOutputTest, JsonLogIsOneObjectPerLineWithKeysOnlyAsHashes) {
  std::vector<std::string> problems;
  const std::vector<Json> lines = TakeoverLog({}, &problems);
  EXPECT_TRUE(problems.empty()) << "not JSON: " << problems.front();
  ASSERT_FALSE(lines.empty());
  for (const Json& line : lines) {
    EXPECT_TRUE(line.contains("time") && line["time"].is_string()) << line.dump();
    EXPECT_TRUE(line.contains("level") && line["level"].is_string()) << line.dump();
    EXPECT_TRUE(line.contains("message") && line["message"].is_string()) << line.dump();
  }
  const Json* serving = Event(lines, "serving dedup.v1.Dedup");
  ASSERT_NE(serving, nullptr);
  // The allocator the build linked (DEDUP_JEMALLOC): jemalloc names its
  // version ("jemalloc 5.3.0-..."), glibc's malloc its name.
  EXPECT_EQ(serving->value("allocator", "").rfind(DEDUPD_ALLOCATOR, 0), 0u) << serving->dump();
  // jemalloc gives freed memory back lazily, so that reusing it costs no
  // page faults (server/main.cc, malloc_conf).
  if (std::string(DEDUPD_ALLOCATOR) == "jemalloc") {
    EXPECT_EQ(serving->value("allocator_muzzy_decay_ms", 0), -1) << serving->dump();
  } else {
    EXPECT_FALSE(serving->contains("allocator_muzzy_decay_ms")) << serving->dump();
  }
  EXPECT_NE(Event(lines, "stopped cleanly"), nullptr);

  const Json* takeover = Event(lines, "lease takeover");
  ASSERT_NE(takeover, nullptr);
  EXPECT_EQ(takeover->value("level", ""), "info");
  EXPECT_EQ(takeover->value("namespace", ""), kNamespace);
  EXPECT_EQ(takeover->value("key_hash", ""),
            absl::StrFormat("%016x", storage::KeyHash(kNamespace, kKey)));
  EXPECT_TRUE(takeover->contains("shard") && (*takeover)["shard"].is_number()) << takeover->dump();
  EXPECT_EQ(takeover->value("owner", ""), "worker-b");
  EXPECT_FALSE(takeover->contains("key")) << takeover->dump();
  // Fencing tokens guard downstream systems too: the new holder's live
  // token is a secret, never logged.
  EXPECT_FALSE(takeover->contains("token")) << takeover->dump();
  for (const Json& line : lines) {
    EXPECT_EQ(line.dump().find(kKey), std::string::npos) << "key in clear: " << line.dump();
  }
}

TEST(OperatorOutputTest, LogKeysPutsTheKeyBesideItsHash) {
  std::vector<std::string> problems;
  const std::vector<Json> lines = TakeoverLog({"--log_keys"}, &problems);
  EXPECT_TRUE(problems.empty()) << "not JSON: " << problems.front();
  const Json* takeover = Event(lines, "lease takeover");
  ASSERT_NE(takeover, nullptr);
  EXPECT_EQ(takeover->value("key", ""), kKey);
  EXPECT_TRUE(takeover->contains("key_hash"));
}

TEST(OperatorOutputTest, UnknownLogFormatIsABadCommandLine) {
  const auto [out, code] =
      RunCommand(absl::StrFormat("'%s' --log_format=xml --metrics_listen=off 2>&1", DEDUPD_PATH));
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("--log_format"), std::string::npos) << out;
}

}  // namespace
}  // namespace dedup::blackbox
