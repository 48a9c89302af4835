#include "latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace dedup::bench {

// Values below kSubBuckets get a bucket each; above, the bucket is the
// position of the highest bit (the "power") and the next kSubBits bits.
int LatencyHistogram::BucketOf(uint64_t nanos) {
  if (nanos < kSubBuckets) return static_cast<int>(nanos);
  const int high_bit = 63 - __builtin_clzll(nanos);
  const int power = high_bit - kSubBits + 1;  // >= 1
  const int sub = static_cast<int>((nanos >> (power - 1)) & (kSubBuckets - 1));
  return power * kSubBuckets + sub;
}

uint64_t LatencyHistogram::UpperBoundOf(int bucket) {
  if (bucket < kSubBuckets) return static_cast<uint64_t>(bucket);
  const int power = bucket / kSubBuckets;
  const uint64_t sub = static_cast<uint64_t>(bucket % kSubBuckets);
  const uint64_t base = (uint64_t{kSubBuckets} | sub) << (power - 1);
  return base + ((uint64_t{1} << (power - 1)) - 1);
}

void LatencyHistogram::Record(uint64_t nanos) {
  ++buckets_[BucketOf(nanos)];
  ++count_;
  max_ = std::max(max_, nanos);
  sum_ += nanos;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (int i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
}

double LatencyHistogram::mean_nanos() const {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_ / count_);
}

uint64_t LatencyHistogram::Percentile(double quantile) const {
  if (count_ == 0) return 0;
  const auto rank = static_cast<uint64_t>(std::ceil(std::clamp(quantile, 0.0, 1.0) * count_));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= std::max<uint64_t>(rank, 1)) return std::min(UpperBoundOf(i), max_);
  }
  return max_;
}

}  // namespace dedup::bench
