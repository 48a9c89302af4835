#include "server/request_translator.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace dedup::server {
namespace {

absl::Status CheckToken(uint64_t token) {
  if (token == 0) {
    return absl::InvalidArgumentError("token: must be non-zero (the token of an ACQUIRED claim)");
  }
  return absl::OkStatus();
}

// A lease asked for by Claim or Extend: unset takes the default.
absl::StatusOr<int64_t> LeaseMs(bool has, uint64_t lease_ms, const Policy& policy,
                                const std::string& ns) {
  if (!has) return policy.lease_default_ms;
  if (lease_ms == 0 || lease_ms > static_cast<uint64_t>(policy.lease_max_ms)) {
    return absl::InvalidArgumentError(absl::StrCat("lease_ms: must be 1..", policy.lease_max_ms,
                                                   " (lease_max of namespace '", ns, "'), got ",
                                                   lease_ms));
  }
  return static_cast<int64_t>(lease_ms);
}

}  // namespace

RequestTranslator::RequestTranslator(std::shared_ptr<const PolicyTable> policies,
                                     uint32_t max_key_bytes, std::shared_ptr<const ShardMap> shards)
    : policies_(std::move(policies)), max_key_bytes_(max_key_bytes), shards_(std::move(shards)) {}

absl::StatusOr<const Policy*> RequestTranslator::Resolve(const std::string& ns) const {
  absl::Status status = ValidateNamespaceName(ns, "namespace");
  if (!status.ok()) return status;
  return policies_->Find(ns);
}

absl::StatusOr<const Policy*> RequestTranslator::ResolveKey(const std::string& ns,
                                                            const std::string& key) const {
  absl::StatusOr<const Policy*> policy = Resolve(ns);
  if (!policy.ok()) return policy;
  if (key.empty() || key.size() > max_key_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: must be 1..", max_key_bytes_, " bytes, got ", key.size()));
  }
  if (shards_ != nullptr) {
    absl::Status owned = shards_->CheckOwned(ns, key);
    if (!owned.ok()) return owned;
  }
  return policy;
}

absl::StatusOr<storage::Operation> RequestTranslator::Translate(const v1::ClaimRequest& r) const {
  absl::StatusOr<const Policy*> policy = ResolveKey(r.namespace_(), r.key());
  if (!policy.ok()) return policy.status();
  if (r.owner().empty() || r.owner().size() > kMaxOwnerBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("owner: must be 1..", kMaxOwnerBytes, " bytes, got ", r.owner().size()));
  }
  if (r.fingerprint().size() > kMaxFingerprintBytes) {
    return absl::InvalidArgumentError(absl::StrCat("fingerprint: must be at most ",
                                                   kMaxFingerprintBytes, " bytes, got ",
                                                   r.fingerprint().size()));
  }
  absl::StatusOr<int64_t> lease = LeaseMs(r.has_lease_ms(), r.lease_ms(), **policy, r.namespace_());
  if (!lease.ok()) return lease.status();
  storage::ClaimOp op;
  op.ns = r.namespace_();
  op.key = r.key();
  op.owner = r.owner();
  op.fingerprint = r.fingerprint();
  op.lease_ms = *lease;
  op.max_attempts = (*policy)->max_attempts;
  op.failed_retention_ms = (*policy)->retention_default_ms;
  return op;
}

absl::StatusOr<storage::Operation> RequestTranslator::Translate(
    const v1::CompleteRequest& r) const {
  absl::StatusOr<const Policy*> policy = ResolveKey(r.namespace_(), r.key());
  if (!policy.ok()) return policy.status();
  absl::Status status = CheckToken(r.token());
  if (!status.ok()) return status;
  if (r.result().size() > (*policy)->max_result_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "result: must be at most ", (*policy)->max_result_bytes,
        " bytes (max_result_bytes of namespace '", r.namespace_(), "'), got ", r.result().size()));
  }
  int64_t retention_ms = (*policy)->retention_default_ms;
  if (r.has_retention_ms()) {
    if (r.retention_ms() < static_cast<uint64_t>((*policy)->retention_floor_ms) ||
        r.retention_ms() == 0 || r.retention_ms() > kMaxRetentionMs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "retention_ms: must be ", std::max<int64_t>((*policy)->retention_floor_ms, 1), "..",
          kMaxRetentionMs, " (retention_floor of namespace '", r.namespace_(),
          "' and the ten-year maximum), got ", r.retention_ms()));
    }
    retention_ms = static_cast<int64_t>(r.retention_ms());
  }
  storage::CompleteOp op;
  op.ns = r.namespace_();
  op.key = r.key();
  op.token = r.token();
  op.result = r.result();
  op.retention_ms = retention_ms;
  return op;
}

absl::StatusOr<storage::Operation> RequestTranslator::Translate(const v1::ReleaseRequest& r) const {
  absl::StatusOr<const Policy*> policy = ResolveKey(r.namespace_(), r.key());
  if (!policy.ok()) return policy.status();
  absl::Status status = CheckToken(r.token());
  if (!status.ok()) return status;
  storage::ReleaseOp op;
  op.ns = r.namespace_();
  op.key = r.key();
  op.token = r.token();
  op.max_attempts = (*policy)->max_attempts;
  op.failed_retention_ms = (*policy)->retention_default_ms;
  return op;
}

absl::StatusOr<storage::Operation> RequestTranslator::Translate(const v1::ExtendRequest& r) const {
  absl::StatusOr<const Policy*> policy = ResolveKey(r.namespace_(), r.key());
  if (!policy.ok()) return policy.status();
  absl::Status status = CheckToken(r.token());
  if (!status.ok()) return status;
  absl::StatusOr<int64_t> lease = LeaseMs(r.has_lease_ms(), r.lease_ms(), **policy, r.namespace_());
  if (!lease.ok()) return lease.status();
  storage::ExtendOp op;
  op.ns = r.namespace_();
  op.key = r.key();
  op.token = r.token();
  op.lease_ms = *lease;
  return op;
}

absl::StatusOr<storage::Operation> RequestTranslator::Translate(const v1::QueryRequest& r) const {
  absl::StatusOr<const Policy*> policy = ResolveKey(r.namespace_(), r.key());
  if (!policy.ok()) return policy.status();
  return storage::QueryOp{r.namespace_(), r.key()};
}

absl::StatusOr<storage::Operation> RequestTranslator::Translate(
    const v1::Operation& operation) const {
  switch (operation.op_case()) {
    case v1::Operation::kClaim:
      return Translate(operation.claim());
    case v1::Operation::kComplete:
      return Translate(operation.complete());
    case v1::Operation::kRelease:
      return Translate(operation.release());
    case v1::Operation::kExtend:
      return Translate(operation.extend());
    case v1::Operation::kQuery:
      return Translate(operation.query());
    case v1::Operation::OP_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("op: must be one of claim, complete, release, extend, query");
}

const std::string& OperationNamespace(const v1::Operation& operation) {
  static const std::string* const kNone = new std::string();
  switch (operation.op_case()) {
    case v1::Operation::kClaim:
      return operation.claim().namespace_();
    case v1::Operation::kComplete:
      return operation.complete().namespace_();
    case v1::Operation::kRelease:
      return operation.release().namespace_();
    case v1::Operation::kExtend:
      return operation.extend().namespace_();
    case v1::Operation::kQuery:
      return operation.query().namespace_();
    case v1::Operation::OP_NOT_SET:
      break;
  }
  return *kNone;
}

}  // namespace dedup::server
