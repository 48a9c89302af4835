#ifndef DEDUP_STORAGE_TOKEN_ALLOCATOR_H_
#define DEDUP_STORAGE_TOKEN_ALLOCATOR_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace dedup::storage {

// Hands out the fencing tokens of one shard: a counter that only grows,
// across restarts and record deletion alike.
//
// Every key lives in exactly one shard for the life of a data directory, so
// a counter per shard that never repeats makes tokens strictly increase per
// key without reading the key's history (which compaction may have dropped).
// The counter is persisted as a ceiling reserved in blocks: before a token at
// or above the persisted ceiling is handed out, a new ceiling is durably
// written; after a restart counting resumes at the stored ceiling, above
// every token issued before.
//
// Thread-safe.
class TokenAllocator {
 public:
  // Durably stores a new ceiling (synced even in buffered mode).
  using PersistCeiling = std::function<absl::Status(uint64_t ceiling)>;

  // `stored_ceiling`: the ceiling read at open (0 for a new shard).
  TokenAllocator(uint64_t stored_ceiling, uint64_t block, PersistCeiling persist);

  // The next token. Fails only when a new ceiling cannot be persisted; no
  // token is handed out then.
  absl::StatusOr<uint64_t> Next();

  // The persisted ceiling: every token handed out so far is below it.
  uint64_t Ceiling() const;

 private:
  const uint64_t block_;
  const PersistCeiling persist_;

  mutable absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_);
  uint64_t ceiling_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_TOKEN_ALLOCATOR_H_
