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

TenantQuota::TaskStart TenantQuota::StartTask(const std::string& tenant,
                                              std::chrono::steady_clock::time_point now) {
  if (tenant.empty()) return TaskStart::kShare;
  absl::MutexLock lock(&mu_);
  Held& held = held_[tenant];
  if (held.tasks >= limits_.max_queued_tasks) {
    Tidy(tenant);
    return TaskStart::kRefused;
  }
  const bool others_active = OthersActive(tenant, now);
  active_.insert(tenant);
  return held.tasks++ > 0 && others_active ? TaskStart::kBeyondShare : TaskStart::kShare;
}

bool TenantQuota::OthersActive(const std::string& tenant,
                               std::chrono::steady_clock::time_point now) {
  // Windows start at whole multiples of kActiveWindow from the first, so a
  // tenant counts as active for one to two windows after its last start.
  if (const auto elapsed = now - window_start_; elapsed >= kActiveWindow) {
    if (elapsed >= 2 * kActiveWindow) {
      active_before_.clear();
    } else {
      active_before_.swap(active_);
    }
    active_.clear();
    window_start_ += (elapsed / kActiveWindow) * kActiveWindow;
  }
  const auto others_in = [&tenant](const absl::flat_hash_set<std::string>& active) {
    return active.size() > (active.contains(tenant) ? 1u : 0u);
  };
  return others_in(active_) || others_in(active_before_);
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
