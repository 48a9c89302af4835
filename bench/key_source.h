#ifndef DEDUP_BENCH_KEY_SOURCE_H_
#define DEDUP_BENCH_KEY_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <random>
#include <string>

namespace dedup::bench {

// The keys of a workload, shared by all callers: each claim is either a new
// key (the next of a global sequence) or, with probability
// `duplicate_ratio`, a repeat of one of the `recent_window` most recent new
// keys, as a redelivery would be. Keys look like random idempotency keys
// (`prefix` then 32 hex digits), so they land all over the key space as
// UUIDs would, not in insertion order.
//
// Thread-safe; each caller draws with its own Picker.
class KeySource {
 public:
  KeySource(std::string prefix, double duplicate_ratio, uint64_t recent_window);

  // The key of sequence number `n`.
  std::string KeyOf(uint64_t n) const;

  // Draws keys for one caller. Not thread-safe: one per caller.
  class Picker {
   public:
    Picker(KeySource* source, uint64_t seed);
    // The next key; sets *duplicate when it repeats an earlier one.
    std::string Next(bool* duplicate);

   private:
    KeySource* source_;
    std::mt19937_64 random_;
    std::uniform_real_distribution<double> coin_{0.0, 1.0};
  };

  uint64_t issued() const { return next_.load(std::memory_order_relaxed); }

 private:
  const std::string prefix_;
  const double duplicate_ratio_;
  const uint64_t recent_window_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_KEY_SOURCE_H_
