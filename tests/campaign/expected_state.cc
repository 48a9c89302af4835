#include "tests/campaign/expected_state.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dedup::campaign {

void ExpectedState::Violation(std::string line) {
  ++totals_.violations;
  if (violations_.size() < 1000) violations_.push_back(std::move(line));
}

void ExpectedState::CompleteSent(const std::string& key, uint64_t token,
                                 const std::string& result) {
  absl::MutexLock lock(&mu_);
  keys_[key].sent[token] = result;
}

void ExpectedState::Acquired(const std::string& key, const std::string& owner, uint64_t token,
                             uint64_t sent) {
  absl::MutexLock lock(&mu_);
  ++totals_.acquired;
  auto [it, added] = keys_.try_emplace(key);
  if (added) ++totals_.keys;
  Key& k = it->second;
  if (k.acknowledged && k.acknowledged_at < sent) {
    Violation(absl::StrCat(key, ": completed with token ", k.acknowledged_token,
                           " (acknowledged) but ", owner, " ACQUIRED it with token ", token,
                           ": a duplicate got through"));
  }
  auto holder = k.holders.find(token);
  if (holder != k.holders.end() && holder->second != owner) {
    Violation(
        absl::StrCat(key, ": token ", token, " ACQUIRED by ", holder->second, " and by ", owner));
  }
  if (token < k.max_token || (token == k.max_token && holder == k.holders.end())) {
    Violation(absl::StrCat(key, ": token went backwards: ", owner, " ACQUIRED ", token, " after ",
                           k.max_token, " was handed out"));
  }
  k.holders.emplace(token, owner);
  if (token > k.max_token) k.max_token = token;
}

void ExpectedState::CompleteAcknowledged(const std::string& key, uint64_t token,
                                         const std::string& result) {
  absl::MutexLock lock(&mu_);
  Key& k = keys_[key];
  if (k.acknowledged && k.acknowledged_token != token) {
    Violation(absl::StrCat(key, ": two completions acknowledged, tokens ", k.acknowledged_token,
                           " and ", token));
    return;
  }
  if (k.acknowledged) return;
  ++totals_.acknowledged_completes;
  k.acknowledged = true;
  k.acknowledged_at = Tick();
  k.acknowledged_token = token;
  k.acknowledged_result = result;
  acknowledged_keys_.push_back(key);
}

void ExpectedState::SawCompleted(const std::string& key, uint64_t token,
                                 const std::string& result) {
  absl::MutexLock lock(&mu_);
  ++totals_.completed_answers_checked;
  Key& k = keys_[key];
  if (k.acknowledged) {
    if (token != k.acknowledged_token || result != k.acknowledged_result) {
      Violation(absl::StrCat(key, ": reads COMPLETED with token ", token, " result \"",
                             absl::CEscape(result), "\"; acknowledged token ",
                             k.acknowledged_token));
    }
    return;
  }
  auto sent = k.sent.find(token);
  if (sent == k.sent.end() || sent->second != result) {
    Violation(absl::StrCat(key, ": reads COMPLETED with token ", token,
                           " that no Complete sent with that result"));
  }
}

void ExpectedState::SawNotCompleted(const std::string& key, const std::string& what,
                                    uint64_t sent) {
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(key);
  if (it == keys_.end() || !it->second.acknowledged || it->second.acknowledged_at >= sent) return;
  Violation(absl::StrCat(key, ": acknowledged complete (token ", it->second.acknowledged_token,
                         ") lost: ", what));
}

bool ExpectedState::IsAcknowledged(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(key);
  return it != keys_.end() && it->second.acknowledged;
}

std::vector<std::string> ExpectedState::SampleAcknowledged(size_t n, std::mt19937_64& rng) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  if (acknowledged_keys_.empty()) return out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(acknowledged_keys_[rng() % acknowledged_keys_.size()]);
  }
  return out;
}

std::vector<std::string> ExpectedState::SampleUnfinished(size_t n, std::mt19937_64& rng) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  if (keys_.empty()) return out;
  // A bounded walk from a random point of the map.
  auto it = keys_.begin();
  std::advance(it, static_cast<long>(rng() % std::min<size_t>(keys_.size(), 4096)));
  for (size_t walked = 0; out.size() < n && walked < 8 * n && it != keys_.end(); ++it, ++walked) {
    if (!it->second.acknowledged) out.push_back(it->first);
  }
  return out;
}

ExpectedState::Totals ExpectedState::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

std::vector<std::string> ExpectedState::Violations() const {
  absl::MutexLock lock(&mu_);
  return violations_;
}

}  // namespace dedup::campaign
