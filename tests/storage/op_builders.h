#ifndef DEDUP_TESTS_STORAGE_OP_BUILDERS_H_
#define DEDUP_TESTS_STORAGE_OP_BUILDERS_H_

#include <cstdint>
#include <string>

#include "storage/operation.h"

// Builders of the operations of design.md §4 for tests, with every policy value
// filled in from one test policy. A test names the key, owner and token it
// is about and overrides a policy value only where that value is the point.
namespace dedup::storage {

// The test policy. The values differ from each other, so that an expiry
// tells which of them set it; retention is shorter than a day, so that tests
// may use a day as "outlives retention".
inline constexpr char kNs[] = "coupon-deduct";
inline constexpr int64_t kLeaseMs = 30'000;
inline constexpr int64_t kRetentionMs = 3'600'000;
inline constexpr int64_t kFailedRetentionMs = 2 * 3'600'000;
inline constexpr uint32_t kMaxAttempts = 3;

inline ClaimOp Claim(const std::string& key, const std::string& owner,
                     const std::string& fingerprint = "", const std::string& ns = kNs) {
  ClaimOp op;
  op.ns = ns;
  op.key = key;
  op.owner = owner;
  op.fingerprint = fingerprint;
  op.lease_ms = kLeaseMs;
  op.max_attempts = kMaxAttempts;
  op.failed_retention_ms = kFailedRetentionMs;
  return op;
}

inline CompleteOp Complete(const std::string& key, uint64_t token,
                           const std::string& result = "done",
                           int64_t retention_ms = kRetentionMs) {
  CompleteOp op;
  op.ns = kNs;
  op.key = key;
  op.token = token;
  op.result = result;
  op.retention_ms = retention_ms;
  return op;
}

inline ReleaseOp Release(const std::string& key, uint64_t token,
                         uint32_t max_attempts = kMaxAttempts) {
  ReleaseOp op;
  op.ns = kNs;
  op.key = key;
  op.token = token;
  op.max_attempts = max_attempts;
  op.failed_retention_ms = kFailedRetentionMs;
  return op;
}

inline ExtendOp Extend(const std::string& key, uint64_t token, int64_t lease_ms = kLeaseMs) {
  ExtendOp op;
  op.ns = kNs;
  op.key = key;
  op.token = token;
  op.lease_ms = lease_ms;
  return op;
}

inline QueryOp Query(const std::string& key, const std::string& ns = kNs) {
  QueryOp op;
  op.ns = ns;
  op.key = key;
  return op;
}

}  // namespace dedup::storage

#endif  // DEDUP_TESTS_STORAGE_OP_BUILDERS_H_
