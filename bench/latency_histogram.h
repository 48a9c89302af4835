#ifndef DEDUP_BENCH_LATENCY_HISTOGRAM_H_
#define DEDUP_BENCH_LATENCY_HISTOGRAM_H_

#include <array>
#include <cstdint>

namespace dedup::bench {

// Latencies in nanoseconds, kept in log-linear buckets: 64 sub-buckets per
// power of two, so a reported percentile is within 1.6% of the true value.
// Fixed size (a few tens of KiB) whatever the count, and mergeable, so each
// caller thread keeps its own and the runner adds them up at the end.
//
// Not thread-safe: one writer at a time.
class LatencyHistogram {
 public:
  void Record(uint64_t nanos);
  void Merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }
  uint64_t max_nanos() const { return max_; }
  double mean_nanos() const;
  // The smallest recorded value v such that at least `quantile` (0..1) of
  // the samples are <= v, as the upper bound of its bucket. 0 when empty.
  uint64_t Percentile(double quantile) const;

 private:
  static constexpr int kSubBits = 6;
  static constexpr int kSubBuckets = 1 << kSubBits;
  static constexpr int kBuckets = (64 - kSubBits + 1) * kSubBuckets;
  static int BucketOf(uint64_t nanos);
  static uint64_t UpperBoundOf(int bucket);

  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  uint64_t max_ = 0;
  long double sum_ = 0;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_LATENCY_HISTOGRAM_H_
