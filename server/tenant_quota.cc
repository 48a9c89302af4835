#include "server/tenant_quota.h"

namespace dedup::server {

bool TenantQuota::TryOpenStream(const std::string& tenant) {
  if (tenant.empty()) return true;
  absl::MutexLock lock(&mu_);
  Held& held = held_[tenant];
  if (held.streams >= limits_.max_open_streams) {
    Tidy(tenant);
    return false;
  }
  ++held.streams;
  return true;
}

void TenantQuota::CloseStream(const std::string& tenant) {
  if (tenant.empty()) return;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(tenant);
  if (it == held_.end() || it->second.streams == 0) return;
  --it->second.streams;
  Tidy(tenant);
}

bool TenantQuota::TryStartTask(const std::string& tenant) {
  if (tenant.empty()) return true;
  absl::MutexLock lock(&mu_);
  Held& held = held_[tenant];
  if (held.tasks >= limits_.max_queued_tasks) {
    Tidy(tenant);
    return false;
  }
  ++held.tasks;
  return true;
}

void TenantQuota::FinishTask(const std::string& tenant) {
  if (tenant.empty()) return;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(tenant);
  if (it == held_.end() || it->second.tasks == 0) return;
  --it->second.tasks;
  Tidy(tenant);
}

size_t TenantQuota::tenants() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

void TenantQuota::Tidy(const std::string& tenant) {
  auto it = held_.find(tenant);
  if (it != held_.end() && it->second.streams == 0 && it->second.tasks == 0) held_.erase(it);
}

}  // namespace dedup::server
