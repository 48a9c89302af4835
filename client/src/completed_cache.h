#ifndef DEDUP_CLIENT_SRC_COMPLETED_CACHE_H_
#define DEDUP_CLIENT_SRC_COMPLETED_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/client/clock.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup::client {

// COMPLETED answers to Claim, kept so that a duplicate of a completed key
// costs no round trip (ClientOptions::completed_cache_entries).
//
// Why a cached answer is exact: a COMPLETED record is final until its
// retention ends; nothing changes it before (a Claim answers COMPLETED with
// the same token, attempts, result and time; Complete and Release refuse).
// So an answer is kept only while the server still remembers it, measured
// on the monotonic clock from before the call was sent, which ends no later
// than the server's own retention, and only for a Claim with the same
// fingerprint (another fingerprint must reach the server, which answers
// MISMATCH). `max_age` caps how long any answer is kept, so that a server
// whose storage time jumped ahead (design.md §5) differs for at most that
// long.
//
// Bounded by entries and by bytes of results; the least recently used
// answer goes first. Thread-safe.
class CompletedCache {
 public:
  // `clock` must outlive the cache. `max_entries` > 0.
  CompletedCache(size_t max_entries, size_t max_bytes, absl::Duration max_age, const Clock* clock);

  CompletedCache(const CompletedCache&) = delete;
  CompletedCache& operator=(const CompletedCache&) = delete;

  // The cached answer to `request`, with retention_remaining_ms as it is
  // now, or nullopt (not cached, expired, or another fingerprint).
  std::optional<v1::ClaimResponse> Find(const v1::ClaimRequest& request);

  // Keeps `answer` to `request` if it is COMPLETED with retention left;
  // `sent` is when the call was first sent (before the server answered).
  void Remember(const v1::ClaimRequest& request, const v1::ClaimResponse& answer, SteadyTime sent);

  size_t size() const;

 private:
  struct Entry {
    std::string id;  // namespace, NUL, key.
    std::string fingerprint;
    v1::ClaimResponse answer;
    SteadyTime expires;
    size_t bytes = 0;
  };
  using Lru = std::list<Entry>;  // Most recently used first.

  void EraseLocked(Lru::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_entries_;
  const size_t max_bytes_;
  const absl::Duration max_age_;
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_COMPLETED_CACHE_H_
