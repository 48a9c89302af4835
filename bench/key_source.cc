#include "key_source.h"

#include <algorithm>
#include <cstdio>

namespace dedup::bench {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

KeySource::KeySource(std::string prefix, double duplicate_ratio, uint64_t recent_window)
    : prefix_(std::move(prefix)),
      duplicate_ratio_(std::clamp(duplicate_ratio, 0.0, 1.0)),
      recent_window_(std::max<uint64_t>(recent_window, 1)) {}

std::string KeySource::KeyOf(uint64_t n) const {
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(SplitMix64(n)),
                static_cast<unsigned long long>(SplitMix64(n ^ 0x5bd1e995ULL)));
  return prefix_ + hex;
}

KeySource::Picker::Picker(KeySource* source, uint64_t seed) : source_(source), random_(seed) {}

std::string KeySource::Picker::Next(bool* duplicate) {
  const uint64_t issued = source_->issued();
  if (issued > 0 && coin_(random_) < source_->duplicate_ratio_) {
    const uint64_t window = std::min(issued, source_->recent_window_);
    const uint64_t back = std::uniform_int_distribution<uint64_t>(1, window)(random_);
    *duplicate = true;
    return source_->KeyOf(issued - back);
  }
  *duplicate = false;
  return source_->KeyOf(source_->next_.fetch_add(1, std::memory_order_relaxed));
}

}  // namespace dedup::bench
