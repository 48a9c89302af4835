// Crash safety of dedupd: what a Complete acknowledged under
// --durability=fsync promised survives a SIGKILL, and no fencing token goes
// backwards across the restart (design.md §2 token, §5).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/blackbox/claim_complete_load.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/common/temp_dir.h"

namespace dedup::blackbox {

using ::dedup::test::TempDir;
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kNamespace[] = "crash-safety";
constexpr int kWriters = 8;
// The kill comes after this many acknowledged completes, or after
// kMaxLoadTime, whichever is first.
constexpr int64_t kAcknowledgedBeforeKill = 1500;
constexpr milliseconds kMaxLoadTime{5'000};
// Short, so that the leases of keys left IN_PROGRESS run out soon after the
// restart and a new owner can take them over.
constexpr uint64_t kLeaseMs = 1'500;
constexpr int kClaimOnlyEvery = 8;

// What a new owner's Claim after the restart found for the keys claimed
// before the crash.
struct ReclaimTally {
  int completed = 0;  // COMPLETED with the stored result.
  int acquired = 0;   // ACQUIRED with a larger token.
  std::vector<std::string> problems;
};

// Checks the answer of a new owner's Claim on a key claimed before the
// crash. Returns true when the key is still IN_PROGRESS under its old
// lease, so the claim has to be retried once the lease has run out.
bool CheckReclaim(const KeyLog& log, const v1::ClaimResponse& claim, ReclaimTally* tally) {
  const std::string outcome = v1::ClaimResponse::Outcome_Name(claim.outcome());
  switch (claim.outcome()) {
    case v1::ClaimResponse::COMPLETED:
      // Only a key whose Complete was sent may be completed, and then with
      // exactly what was sent, under the token that was handed out.
      if (log.fate == KeyFate::kClaimedOnly) {
        tally->problems.push_back(
            absl::StrCat(log.key, " was never completed but a new claim got COMPLETED"));
      } else if (claim.result() != log.result || claim.token() != log.token) {
        tally->problems.push_back(absl::StrCat(log.key, " replays token ", claim.token(),
                                               " and a result other than the one completed "
                                               "with token ",
                                               log.token));
      } else {
        ++tally->completed;
      }
      return false;
    case v1::ClaimResponse::ACQUIRED:
      if (log.fate == KeyFate::kCompleted) {
        tally->problems.push_back(absl::StrCat("acknowledged completion of ", log.key,
                                               " was lost: a new owner ACQUIRED it"));
      } else if (claim.token() <= log.token) {
        tally->problems.push_back(absl::StrCat("token went backwards for ", log.key,
                                               ": handed out ", log.token, " before the crash, ",
                                               claim.token(), " to a new owner after it"));
      } else {
        ++tally->acquired;
      }
      return false;
    case v1::ClaimResponse::IN_PROGRESS:
      if (log.fate == KeyFate::kCompleted) {
        tally->problems.push_back(
            absl::StrCat("acknowledged completion of ", log.key, " reads as IN_PROGRESS"));
        return false;
      }
      // The holder's token is not shown to another owner (design.md §10);
      // the ACQUIRED answer once the lease has run out checks the token.
      if (claim.token() != 0 || claim.holder() != log.owner) {
        tally->problems.push_back(absl::StrCat(
            log.key, " is IN_PROGRESS of ", claim.holder(), " showing token ", claim.token(),
            "; the only claim was token ", log.token, " of ", log.owner));
        return false;
      }
      return true;
    default:
      tally->problems.push_back(absl::StrCat(log.key, ": unexpected ", outcome));
      return false;
  }
}

// A new owner claims every key of `keys`, retrying those still under their
// old lease until it has run out (bounded).
ReclaimTally ReclaimAll(DedupClient& client, const std::vector<KeyLog>& keys) {
  ReclaimTally tally;
  const Clock::time_point deadline = Clock::now() + milliseconds(kLeaseMs) + milliseconds(8'000);
  std::vector<const KeyLog*> pending;
  for (const KeyLog& log : keys) pending.push_back(&log);
  while (!pending.empty()) {
    std::vector<const KeyLog*> still_leased;
    for (const KeyLog* log : pending) {
      v1::ClaimResponse claim;
      grpc::Status status = client.Claim(kNamespace, log->key, "after-restart", 60'000, &claim);
      if (!status.ok()) {
        tally.problems.push_back(
            absl::StrCat("Claim ", log->key, " after restart failed: ", status.error_message()));
      } else if (CheckReclaim(*log, claim, &tally)) {
        still_leased.push_back(log);
      }
    }
    pending = std::move(still_leased);
    if (pending.empty()) break;
    if (Clock::now() > deadline) {
      for (const KeyLog* log : pending) {
        tally.problems.push_back(absl::StrCat(log->key, " is still IN_PROGRESS well after its ",
                                              kLeaseMs, " ms lease must have ended"));
      }
      break;
    }
    std::this_thread::sleep_for(milliseconds(50));  // Polls for the leases to run out.
  }
  return tally;
}

int CountFate(const std::vector<KeyLog>& keys, KeyFate fate) {
  int n = 0;
  for (const KeyLog& log : keys) n += log.fate == fate ? 1 : 0;
  return n;
}

TEST(CrashSafetyTest, AcknowledgedCompletesSurviveSigkillAndTokensNeverGoBackwards) {
  TempDir dir;
  const std::string data_dir = dir.Sub("data");
  const std::vector<std::string> flags = {"--durability=fsync"};

  absl::StatusOr<std::unique_ptr<ServingDedupd>> server =
      ServingDedupd::Start(dir.path(), data_dir, flags);
  ASSERT_TRUE(server.ok()) << server.status();

  ClaimCompleteLoad::Options options;
  options.ns = kNamespace;
  options.writers = kWriters;
  options.lease_ms = kLeaseMs;
  options.claim_only_every = kClaimOnlyEvery;
  ClaimCompleteLoad load((*server)->channel(), options);
  const Clock::time_point give_up = Clock::now() + kMaxLoadTime;
  while (load.acknowledged() < kAcknowledgedBeforeKill && load.running() == kWriters &&
         Clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  load.ExpectServerLoss();
  EXPECT_EQ((*server)->process().Kill(), ExitStatus::Signaled(SIGKILL));
  load.Join();
  ASSERT_TRUE(load.Unexpected().empty()) << "before the kill:\n" << FirstLines(load.Unexpected());
  const std::vector<KeyLog> keys = load.Keys();
  const int acknowledged = CountFate(keys, KeyFate::kCompleted);
  ASSERT_GE(acknowledged, 50) << "too little work before the kill to test anything";

  absl::StatusOr<std::unique_ptr<ServingDedupd>> restarted =
      ServingDedupd::Start(dir.path(), data_dir, flags);
  ASSERT_TRUE(restarted.ok()) << "restart after SIGKILL: " << restarted.status();

  const std::vector<std::string> lost =
      CheckCompletedReadBack((*restarted)->client(), kNamespace, keys);
  EXPECT_TRUE(lost.empty()) << lost.size() << " of " << acknowledged
                            << " acknowledged completes did not survive:\n"
                            << FirstLines(lost);

  const ReclaimTally tally = ReclaimAll((*restarted)->client(), keys);
  EXPECT_TRUE(tally.problems.empty()) << FirstLines(tally.problems);
  EXPECT_EQ(tally.completed + tally.acquired + static_cast<int>(tally.problems.size()),
            static_cast<int>(keys.size()));
  EXPECT_GE(tally.acquired, CountFate(keys, KeyFate::kClaimedOnly));

  std::printf(
      "crash: %d completes acknowledged before SIGKILL, %d keys claimed only, %d completes "
      "unanswered; after restart %d acknowledged read back, %d keys reclaimed: %d COMPLETED, "
      "%d ACQUIRED with a larger token\n",
      acknowledged, CountFate(keys, KeyFate::kClaimedOnly),
      CountFate(keys, KeyFate::kCompleteUnanswered), acknowledged - static_cast<int>(lost.size()),
      static_cast<int>(keys.size()), tally.completed, tally.acquired);

  absl::StatusOr<ExitStatus> stopped = (*restarted)->process().Terminate(milliseconds(15'000));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, ExitStatus::Exited(0)) << (*restarted)->process().Output();
}

}  // namespace
}  // namespace dedup::blackbox
