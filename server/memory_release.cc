#include "server/memory_release.h"

#include <malloc.h>

#include <utility>

#include "storage/thread_name.h"

namespace dedup::server {
namespace {

absl::Mutex release_mu(absl::kConstInit);
std::function<void()>* installed ABSL_GUARDED_BY(release_mu) = nullptr;

}  // namespace

MemoryRelease::MemoryRelease(std::function<void()> release, Options options)
    : release_(std::move(release)), options_(options) {
  if (release_) thread_ = std::thread([this] { Run(); });
}

MemoryRelease::~MemoryRelease() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void MemoryRelease::Freed(uint64_t bytes) {
  if (!release_) return;
  absl::MutexLock lock(&mu_);
  pending_ += bytes;
}

uint64_t MemoryRelease::releases() const {
  absl::MutexLock lock(&mu_);
  return releases_;
}

void MemoryRelease::Run() {
  storage::NameThisThread("memory-release");
  absl::MutexLock lock(&mu_);
  const auto due = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || pending_ >= options_.threshold;
  };
  while (true) {
    mu_.Await(absl::Condition(&due));
    if (stopping_) return;
    pending_ = 0;
    mu_.Unlock();
    release_();
    mu_.Lock();
    ++releases_;
    // Frees noted meanwhile wait for the next round.
    const auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopping), options_.min_interval);
  }
}

std::function<void()> AllocatorRelease() {
  absl::MutexLock lock(&release_mu);
  if (installed != nullptr) return *installed;
  return [] { malloc_trim(0); };
}

void SetAllocatorRelease(std::function<void()> release) {
  absl::MutexLock lock(&release_mu);
  delete installed;
  installed = new std::function<void()>(std::move(release));
}

}  // namespace dedup::server
