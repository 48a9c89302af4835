#ifndef DEDUP_STORAGE_OPERATION_H_
#define DEDUP_STORAGE_OPERATION_H_

#include <cstdint>
#include <string>
#include <variant>

#include "storage/record.h"

namespace dedup::storage {

// The operations of design.md §4, with every policy value already resolved by
// the caller (the server validates input and applies namespace policy; the
// storage layer trusts what it is given).
//
// `identity` is the authenticated caller (design.md §10), empty when the
// server runs without authentication. Storage records it as the holder of
// the claims it takes, and refuses another identity's use of their tokens.

struct ClaimOp {
  std::string ns;
  std::string key;
  std::string owner;
  std::string fingerprint;          // Empty: none given.
  int64_t lease_ms = 0;             // > 0.
  uint32_t max_attempts = 0;        // > 0; acquisitions before poisoning.
  int64_t failed_retention_ms = 0;  // How long a poisoned key is kept.
  std::string identity;
};

struct CompleteOp {
  std::string ns;
  std::string key;
  uint64_t token = 0;
  std::string result;
  int64_t retention_ms = 0;  // > 0.
  std::string identity;
};

struct ReleaseOp {
  std::string ns;
  std::string key;
  uint64_t token = 0;
  uint32_t max_attempts = 0;
  int64_t failed_retention_ms = 0;
  std::string identity;
};

struct ExtendOp {
  std::string ns;
  std::string key;
  uint64_t token = 0;
  int64_t lease_ms = 0;  // > 0; the new lease runs from now.
  std::string identity;
};

struct QueryOp {
  std::string ns;
  std::string key;
};

using Operation = std::variant<ClaimOp, CompleteOp, ReleaseOp, ExtendOp, QueryOp>;

// Outcomes of all operations, named as in the API.
enum class Outcome {
  // Claim
  kAcquired,
  kInProgress,
  kCompleted,
  kFailed,  // Claim of a poisoned key, or a Release that poisoned it.
  kMismatch,
  // Complete, Release, Extend
  kOk,
  kAlreadyCompleted,
  kStaleToken,
  kNotFound,
  // Query
  kFound,
  kAbsent,
};

const char* OutcomeName(Outcome outcome);

// What an operation answered, and the record as the caller may see it after
// the operation (state is the effective state; for kAbsent the record holds
// whatever history is left, such as the last token of a lapsed lease).
struct OpResult {
  Outcome outcome = Outcome::kAbsent;
  Record record;
  bool takeover = false;  // Claim: acquired over an expired lease.
  bool poisoned = false;  // This operation made the key FAILED.
  // Complete, Release or Extend: answered STALE_TOKEN because the token is
  // the newest of a claim another identity holds (lifecycle.h).
  bool foreign_token = false;
  int64_t now_ms = 0;  // The storage time the answer was decided at.
};

// Sets the authenticated caller of a Claim, Complete, Release or Extend;
// a Query is the same for every caller.
void SetIdentity(Operation* op, const std::string& identity);

// The namespace and key an operation addresses.
const std::string& OpNamespace(const Operation& op);
const std::string& OpKey(const Operation& op);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_OPERATION_H_
