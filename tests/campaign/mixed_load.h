#ifndef DEDUP_TESTS_CAMPAIGN_MIXED_LOAD_H_
#define DEDUP_TESTS_CAMPAIGN_MIXED_LOAD_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "storage/operation.h"
#include "tests/campaign/expected_state.h"
#include "tests/campaign/target.h"

namespace dedup::campaign {

// A namespace of the campaign and its policy, the same in the dedupd
// config (CampaignConfig) and in the operations sent to an in-process
// store.
struct Policy {
  std::string ns;
  int64_t lease_ms;
  uint32_t max_attempts;
};
// Three policies: long lease and many attempts, few attempts (releases
// poison keys), a short lease (leases lapse and are taken over).
const std::vector<Policy>& Policies();
// Retention of every Complete: longer than any campaign, so that nothing
// may be forgotten.
inline constexpr int64_t kRetentionMs = 30LL * 24 * 3600'000;
// The dedupd config (text proto) declaring the policies.
std::string CampaignConfig();

// What a load sent and was answered, by kind.
struct LoadCounts {
  uint64_t calls[3] = {0, 0, 0};  // By Mode.
  uint64_t answered = 0;          // Operations answered.
  uint64_t unanswered = 0;        // Operations of failed calls.
  uint64_t acquired = 0;
  uint64_t completes_acknowledged = 0;
  uint64_t releases = 0;
  uint64_t extends = 0;
  uint64_t redeliveries = 0;  // Claims of acknowledged keys.
  uint64_t retries = 0;       // Claims of keys never completed.
  void Add(const LoadCounts& other);
};

// Worker threads sending a random mix to `target` and passing every answer
// through `oracle`: fresh keys claimed then completed, released, extended
// and completed, or left; redeliveries of completed keys; new owners
// retrying unfinished keys; claims and completes of several keys in one
// Batch or Stream. Each call goes unary, as a Batch or on a Stream at
// random. A worker stops at its first failed call, or when asked.
class MixedLoad {
 public:
  // `pause_us`: how long each worker sleeps between actions (0: none).
  MixedLoad(Target* target, ExpectedState* oracle, std::string prefix, int workers, uint64_t seed,
            int64_t pause_us = 0);
  ~MixedLoad();

  void Stop() { stop_ = true; }
  void Join();
  int running() const { return running_.load(); }
  uint64_t answered() const { return answered_.load(); }
  // After Join.
  LoadCounts counts() const;
  // Keys (oracle names) whose Complete this load saw acknowledged.
  std::vector<std::string> acknowledged() const;

 private:
  class Worker;

  Target* const target_;
  ExpectedState* const oracle_;
  const std::string prefix_;
  const uint64_t seed_;
  const int64_t pause_us_;
  std::atomic<bool> stop_{false};
  std::atomic<int> running_{0};
  std::atomic<uint64_t> answered_{0};
  mutable absl::Mutex mu_;
  LoadCounts counts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> acknowledged_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

// The oracle's name of a key, and back.
std::string OracleKey(const std::string& ns, const std::string& key);
void SplitOracleKey(const std::string& name, std::string* ns, std::string* key);

// The Query of every key in `names` through `target`, checked by `oracle`.
// Returns how many were not answered.
size_t ReadBack(Target* target, ExpectedState* oracle, const std::vector<std::string>& names);

}  // namespace dedup::campaign

#endif  // DEDUP_TESTS_CAMPAIGN_MIXED_LOAD_H_
