#ifndef DEDUP_TESTS_CAMPAIGN_EXPECTED_STATE_H_
#define DEDUP_TESTS_CAMPAIGN_EXPECTED_STATE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dedup::campaign {

// The expected-state oracle (after RocksDB's crash test): what every
// answer the campaign ever got promises about each key, checked against
// every later answer, across kills, power losses, full disks and clock
// steps:
//   - acknowledged completes are durable: once a Complete was answered OK
//     (or ALREADY_COMPLETED), every Claim answers COMPLETED with that token
//     and result, and so does every Query;
//   - tokens grow: an ACQUIRED token is never below one handed out before
//     for the key, and equal only for the same owner (a re-entrant claim);
//   - at most one ACQUIRED per token: a token of a key is never handed to
//     two owners;
//   - nothing is made up: a COMPLETED answer carries a token and result
//     that some Complete sent.
// Retention in the campaign outlasts the campaign, so nothing may expire.
//
// Thread-safe.
class ExpectedState {
 public:
  // A point in the order of events: take one before sending a call, and
  // pass it with its answer, so that an answer is judged only against
  // acknowledgements recorded before the call was sent.
  uint64_t Tick() { return clock_.fetch_add(1) + 1; }

  // Before a Complete is sent (it may take effect without an answer).
  void CompleteSent(const std::string& key, uint64_t token, const std::string& result);
  void Acquired(const std::string& key, const std::string& owner, uint64_t token, uint64_t sent);
  void CompleteAcknowledged(const std::string& key, uint64_t token, const std::string& result);
  // A Claim answered COMPLETED, or a Query that found the key COMPLETED.
  void SawCompleted(const std::string& key, uint64_t token, const std::string& result);
  // A Claim or Query that did not find an acknowledged complete.
  void SawNotCompleted(const std::string& key, const std::string& what, uint64_t sent);

  // True when `key` has an acknowledged complete.
  bool IsAcknowledged(const std::string& key) const;
  // Up to `n` keys with an acknowledged complete, chosen with `rng`.
  std::vector<std::string> SampleAcknowledged(size_t n, std::mt19937_64& rng) const;
  // Up to `n` keys claimed but never acknowledged complete.
  std::vector<std::string> SampleUnfinished(size_t n, std::mt19937_64& rng) const;

  struct Totals {
    uint64_t acquired = 0;
    uint64_t acknowledged_completes = 0;
    uint64_t completed_answers_checked = 0;
    uint64_t keys = 0;
    uint64_t violations = 0;
  };
  Totals totals() const;
  // Every violation so far, one line each.
  std::vector<std::string> Violations() const;

 private:
  struct Key {
    std::map<uint64_t, std::string> holders;  // Token -> owner it was ACQUIRED by.
    uint64_t max_token = 0;
    std::map<uint64_t, std::string> sent;  // Complete token -> result.
    bool acknowledged = false;
    uint64_t acknowledged_at = 0;  // Tick() when the acknowledgement was recorded.
    uint64_t acknowledged_token = 0;
    std::string acknowledged_result;
  };
  void Violation(std::string line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<uint64_t> clock_{0};
  mutable absl::Mutex mu_;
  std::map<std::string, Key> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> acknowledged_keys_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> violations_ ABSL_GUARDED_BY(mu_);
  Totals totals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::campaign

#endif  // DEDUP_TESTS_CAMPAIGN_EXPECTED_STATE_H_
