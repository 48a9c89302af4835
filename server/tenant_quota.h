#ifndef DEDUP_SERVER_TENANT_QUOTA_H_
#define DEDUP_SERVER_TENANT_QUOTA_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace dedup::server {

// What one tenant may hold of the server at once, so that no tenant can
// take what the server-wide limits leave for all (design.md §10): open
// Stream calls, and storage tasks (a unary call, a Batch, or one batch of
// a Stream) queued for or held by a worker. A tenant is an authenticated
// identity. Without authentication every caller is trusted alike and the
// empty tenant is not limited: a loopback or single-tenant server keeps
// the whole of the server-wide limits for its clients.
//
// Thread-safe. Tenants holding nothing take no memory.
class TenantQuota {
 public:
  struct Limits {
    uint32_t max_open_streams = 32;
    uint32_t max_queued_tasks = 256;
  };

  explicit TenantQuota(Limits limits) : limits_(limits) {}

  TenantQuota(const TenantQuota&) = delete;
  TenantQuota& operator=(const TenantQuota&) = delete;

  // Counts one in for `tenant`, or returns false when it holds its limit.
  // Each true is matched by one Close/Finish with the same tenant.
  bool TryOpenStream(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);
  void CloseStream(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);
  bool TryStartTask(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);
  void FinishTask(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);

  // Tenants holding anything now.
  size_t tenants() const ABSL_LOCKS_EXCLUDED(mu_);
  const Limits& limits() const { return limits_; }

 private:
  struct Held {
    uint32_t streams = 0;
    uint32_t tasks = 0;
  };
  // Drops `tenant`'s entry once it holds nothing.
  void Tidy(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_TENANT_QUOTA_H_
