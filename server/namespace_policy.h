#ifndef DEDUP_SERVER_NAMESPACE_POLICY_H_
#define DEDUP_SERVER_NAMESPACE_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dedup::server {

// The resolved policy of one namespace, in milliseconds and bytes.
struct Policy {
  int64_t lease_default_ms = 30'000;
  int64_t lease_max_ms = 10 * 60'000;
  int64_t retention_default_ms = 24 * 3600'000LL;
  int64_t retention_floor_ms = 3600'000;
  uint32_t max_result_bytes = 64 * 1024;
  uint32_t max_attempts = 5;
};

// Longest namespace name.
inline constexpr size_t kMaxNamespaceBytes = 64;

// OK when `name` is 1..64 characters of [a-z0-9._-] starting with a letter or
// digit; otherwise INVALID_ARGUMENT naming `field` and the rule.
absl::Status ValidateNamespaceName(absl::string_view name, absl::string_view field);

// Policies by namespace. Immutable after construction; safe to share
// between threads.
class PolicyTable {
 public:
  PolicyTable(Policy default_policy, absl::flat_hash_map<std::string, Policy> declared,
              bool strict);

  // The policy of `ns`: its declared one, else the default policy; NOT_FOUND
  // for an undeclared namespace on a strict server. `ns` must be valid.
  absl::StatusOr<const Policy*> Find(absl::string_view ns) const;

  bool strict() const { return strict_; }
  const absl::flat_hash_map<std::string, Policy>& declared() const { return declared_; }

 private:
  const Policy default_;
  const absl::flat_hash_map<std::string, Policy> declared_;
  const bool strict_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_NAMESPACE_POLICY_H_
