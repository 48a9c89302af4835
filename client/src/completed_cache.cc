#include "completed_cache.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

namespace dedup::client {
namespace {

std::string IdOf(const v1::ClaimRequest& request) {
  std::string id = request.namespace_();
  id.push_back('\0');  // Namespaces hold no NUL, so the split is unique.
  id += request.key();
  return id;
}

}  // namespace

CompletedCache::CompletedCache(size_t max_entries, size_t max_bytes, absl::Duration max_age,
                               const Clock* clock)
    : max_entries_(max_entries), max_bytes_(max_bytes), max_age_(max_age), clock_(clock) {}

std::optional<v1::ClaimResponse> CompletedCache::Find(const v1::ClaimRequest& request) {
  const std::string id = IdOf(request);
  const SteadyTime now = clock_->SteadyNow();
  absl::MutexLock lock(&mu_);
  auto found = index_.find(id);
  if (found == index_.end()) return std::nullopt;
  Lru::iterator it = found->second;
  if (now >= it->expires) {
    EraseLocked(it);
    return std::nullopt;
  }
  if (it->fingerprint != request.fingerprint()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it);
  v1::ClaimResponse answer = it->answer;
  answer.set_retention_remaining_ms(
      static_cast<uint64_t>(absl::ToInt64Milliseconds(it->expires - now)));
  return answer;
}

void CompletedCache::Remember(const v1::ClaimRequest& request, const v1::ClaimResponse& answer,
                              SteadyTime sent) {
  if (answer.outcome() != v1::ClaimResponse::COMPLETED || answer.retention_remaining_ms() == 0) {
    return;
  }
  const uint64_t cap_ms = static_cast<uint64_t>(absl::ToInt64Milliseconds(max_age_));
  const absl::Duration keep = absl::Milliseconds(
      static_cast<int64_t>(std::min<uint64_t>(answer.retention_remaining_ms(), cap_ms)));
  const SteadyTime expires = sent + keep;
  if (clock_->SteadyNow() >= expires) return;
  const size_t bytes = request.namespace_().size() + request.key().size() +
                       request.fingerprint().size() + answer.result().size() + sizeof(Entry);
  if (bytes > max_bytes_) return;
  Entry entry{IdOf(request), request.fingerprint(), answer, expires, bytes};
  absl::MutexLock lock(&mu_);
  if (auto found = index_.find(entry.id); found != index_.end()) EraseLocked(found->second);
  lru_.push_front(std::move(entry));
  index_[lru_.front().id] = lru_.begin();
  bytes_ += bytes;
  while (lru_.size() > max_entries_ || bytes_ > max_bytes_) EraseLocked(std::prev(lru_.end()));
}

size_t CompletedCache::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

void CompletedCache::EraseLocked(Lru::iterator it) {
  bytes_ -= it->bytes;
  index_.erase(it->id);
  lru_.erase(it);
}

}  // namespace dedup::client
