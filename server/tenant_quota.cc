#include "server/tenant_quota.h"

#include <algorithm>

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

TenantQuota::Started TenantQuota::Start(const std::string& tenant, uint64_t operations,
                                        std::chrono::steady_clock::time_point now) {
  if (tenant.empty()) return {TaskStart::kShare, std::nullopt};
  absl::MutexLock lock(&mu_);
  Held& held = held_[tenant];
  if (held.tasks >= limits_.max_queued_tasks) {
    Tidy(tenant);
    return {TaskStart::kRefused, std::nullopt};
  }
  std::optional<std::chrono::steady_clock::time_point> not_before;
  if (limits_.max_operations_per_second > 0) {
    if (paid_until_.size() >= sweep_at_) {
      absl::erase_if(paid_until_, [now](const auto& entry) { return entry.second <= now; });
      sweep_at_ = std::max<size_t>(64, 2 * paid_until_.size());
    }
    auto& paid_until = paid_until_.try_emplace(tenant, now).first->second;
    const auto paid = std::max(paid_until, now);
    const auto start = std::max(now, paid - std::chrono::steady_clock::duration(kRateBurst));
    if (start > now) not_before = start;
    if (start - now > kMaxRateWait) {
      Tidy(tenant);
      return {TaskStart::kOverRate, not_before};
    }
    paid_until = paid + Cost(operations);
  }
  MoveWindows(now);
  auto [mine, first] = started_.try_emplace(tenant, 0);
  const auto before = started_before_.find(tenant);
  const uint64_t its_before = before == started_before_.end() ? 0 : before->second;
  if (first && before == started_before_.end()) ++active_tenants_;
  mine->second += operations;
  started_sum_ += operations;
  const bool beside_its_own = held.tasks++ > 0;
  if (active_tenants_ < 2) return {TaskStart::kShare, not_before};
  if (beside_its_own) return {TaskStart::kBeyondShare, not_before};
  // Its operations against an equal share of all active tenants'.
  const double its = static_cast<double>(mine->second + its_before);
  const double equal_share = static_cast<double>(started_sum_ + started_before_sum_) /
                             static_cast<double>(active_tenants_);
  return {its > kHeavyShare * equal_share ? TaskStart::kBeyondShare : TaskStart::kShare,
          not_before};
}

std::chrono::nanoseconds TenantQuota::Cost(uint64_t operations) const {
  // At least one: a call of no operations still costs the server its
  // handling. At most a million, far past any call (a Batch holds at most
  // 1,000), so that the product cannot overflow.
  const uint64_t charged = std::clamp<uint64_t>(operations, 1, 1'000'000);
  return std::chrono::nanoseconds(
      static_cast<int64_t>(charged * 1'000'000'000 / limits_.max_operations_per_second));
}

void TenantQuota::Refund(const std::string& tenant, uint64_t operations) {
  if (tenant.empty() || limits_.max_operations_per_second == 0) return;
  absl::MutexLock lock(&mu_);
  if (auto it = paid_until_.find(tenant); it != paid_until_.end()) it->second -= Cost(operations);
}

void TenantQuota::MoveWindows(std::chrono::steady_clock::time_point now) {
  // Windows start at whole multiples of kActiveWindow from the first, so a
  // tenant counts as active for one to two windows after its last start.
  const auto elapsed = now - window_start_;
  if (elapsed < kActiveWindow) return;
  if (elapsed >= 2 * kActiveWindow) {
    started_before_.clear();
    started_before_sum_ = 0;
  } else {
    started_before_.swap(started_);
    started_before_sum_ = started_sum_;
  }
  started_.clear();
  started_sum_ = 0;
  active_tenants_ = started_before_.size();
  window_start_ += (elapsed / kActiveWindow) * kActiveWindow;
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
