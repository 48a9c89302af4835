#ifndef DEDUP_SERVER_MEMORY_RELEASE_H_
#define DEDUP_SERVER_MEMORY_RELEASE_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dedup::server {

// Hands memory that large answers leave free back to the system, so that a
// burst of them (Streams and Batches of big stored results) does not stay
// in the server's resident size. The allocator keeps what is freed for
// reuse: jemalloc for its dirty decay (10 s) and then, as dedupd sets it,
// lazily (MADV_FREE, still counted as resident until the kernel needs it);
// glibc per thread arena. That suits the small, steady allocations of
// claims, and not answers of megabytes.
//
// Callers note the bytes of each large answer they free; once `threshold`
// bytes are noted, a thread of this class calls `release` (which returns
// the allocator's free memory to the system), at most once per
// `min_interval`.
//
// Thread-safe.
// Answers at least this large are noted to MemoryRelease when freed;
// smaller ones are the allocator's steady business.
inline constexpr uint64_t kLargeAnswerBytes = 64 << 10;

class MemoryRelease {
 public:
  struct Options {
    uint64_t threshold = 32ull << 20;
    absl::Duration min_interval = absl::Milliseconds(250);
  };

  // `release` may be empty: then nothing is released and no thread runs.
  MemoryRelease(std::function<void()> release, Options options);
  ~MemoryRelease();

  MemoryRelease(const MemoryRelease&) = delete;
  MemoryRelease& operator=(const MemoryRelease&) = delete;

  // Notes that `bytes` of an answer were freed.
  void Freed(uint64_t bytes);

  // Times `release` has been called.
  uint64_t releases() const;

 private:
  void Run();

  const std::function<void()> release_;
  const Options options_;
  mutable absl::Mutex mu_;
  uint64_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t releases_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The process's way to return the allocator's free memory to the system:
// what SetAllocatorRelease installed (dedupd's main() installs jemalloc's
// purge), else glibc's malloc_trim.
std::function<void()> AllocatorRelease();
// Installs `release` for AllocatorRelease. Call before any server starts.
void SetAllocatorRelease(std::function<void()> release);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_MEMORY_RELEASE_H_
