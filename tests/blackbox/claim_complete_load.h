#ifndef DEDUP_TESTS_BLACKBOX_CLAIM_COMPLETE_LOAD_H_
#define DEDUP_TESTS_BLACKBOX_CLAIM_COMPLETE_LOAD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "tests/blackbox/dedup_client.h"

namespace dedup::blackbox {

// What became of a key whose claim was answered ACQUIRED.
enum class KeyFate {
  // Complete answered OK: acknowledged, so it must survive anything.
  kCompleted,
  // Deliberately left IN_PROGRESS (never completed).
  kClaimedOnly,
  // Complete was sent but got no answer: the server went away meanwhile.
  kCompleteUnanswered,
};

struct KeyLog {
  std::string key;
  std::string owner;
  uint64_t token = 0;  // Handed out by the ACQUIRED claim.
  std::string result;  // Sent with Complete (empty for kClaimedOnly).
  KeyFate fate = KeyFate::kClaimedOnly;
};

// The result stored for `key`: bytes derived from the key, with a NUL and a
// byte that is not UTF-8, so that byte-exact storage is checked.
std::string ResultFor(const std::string& key);

// Writer threads that each claim and complete their own distinct keys as
// fast as the server answers, logging every token handed out and every
// acknowledged Complete. A writer stops at its first failed call or
// unexpected outcome, or when asked to.
//
// The methods may be called from any thread.
class ClaimCompleteLoad {
 public:
  struct Options {
    std::string ns;
    int writers = 8;
    uint64_t lease_ms = 30'000;
    // Every Nth key of a writer is claimed and left IN_PROGRESS; 0: none.
    int claim_only_every = 0;
  };

  // Starts the writers on `channel`.
  ClaimCompleteLoad(std::shared_ptr<grpc::Channel> channel, Options options);
  // Stops and joins the writers.
  ~ClaimCompleteLoad();

  ClaimCompleteLoad(const ClaimCompleteLoad&) = delete;
  ClaimCompleteLoad& operator=(const ClaimCompleteLoad&) = delete;

  // Completes acknowledged so far.
  int64_t acknowledged() const { return acknowledged_.load(); }
  // Writers that have not stopped yet.
  int running() const { return running_.load(); }

  // From now on failed calls are expected (the server is being stopped or
  // killed): they stop the writers without counting as unexpected.
  void ExpectServerLoss() { server_loss_expected_.store(true); }
  // Asks the writers to stop after their current call.
  void Stop() { stop_.store(true); }
  // Waits until every writer has stopped.
  void Join();

  // Every key whose claim was answered ACQUIRED, with what became of it.
  std::vector<KeyLog> Keys() const;
  // One line per unexpected event: a call that failed before
  // ExpectServerLoss(), or an outcome other than ACQUIRED / OK.
  std::vector<std::string> Unexpected() const;
  // How the calls that failed after ExpectServerLoss() ended.
  std::vector<grpc::Status> Interruptions() const;

 private:
  void RunWriter(int writer);
  // Logs a failed call as an interruption or as unexpected.
  void LogFailure(const std::string& what, const grpc::Status& status);

  const Options options_;
  DedupClient client_;
  std::atomic<int64_t> acknowledged_{0};
  std::atomic<int> running_{0};
  std::atomic<bool> server_loss_expected_{false};
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;
  std::vector<KeyLog> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> unexpected_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::Status> interruptions_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> threads_;  // Started last, in the constructor.
};

// Queries every kCompleted key of `keys` in `ns` and returns one line per
// key that does not read back as COMPLETED with its token and exactly its
// result (empty: all do).
std::vector<std::string> CheckCompletedReadBack(DedupClient& client, const std::string& ns,
                                                const std::vector<KeyLog>& keys);

// The first `n` of `lines`, one per line, and how many were left out: for
// failure messages that must not drown the log.
std::string FirstLines(const std::vector<std::string>& lines, size_t n = 10);

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_CLAIM_COMPLETE_LOAD_H_
