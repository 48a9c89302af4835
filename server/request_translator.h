#ifndef DEDUP_SERVER_REQUEST_TRANSLATOR_H_
#define DEDUP_SERVER_REQUEST_TRANSLATOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "dedup/v1/dedup.pb.h"
#include "server/namespace_policy.h"
#include "server/shard_map.h"
#include "storage/operation.h"

namespace dedup::server {

inline constexpr size_t kMaxOwnerBytes = 256;
inline constexpr size_t kMaxFingerprintBytes = 256;
// Longest retention a Complete may ask for (ten years): keeps expiry
// arithmetic far from overflow.
inline constexpr uint64_t kMaxRetentionMs = 10ull * 365 * 24 * 3600 * 1000;

// Validates dedup.v1 requests (design.md §4) and turns them into storage
// operations with the namespace's policy applied. Every error is
// INVALID_ARGUMENT naming the field and its bound, or NOT_FOUND for an
// undeclared namespace on a strict server. Immutable; thread-safe.
class RequestTranslator {
 public:
  // `shards` (null: every key is local) turns keys of other nodes into
  // FAILED_PRECONDITION naming the owner.
  RequestTranslator(std::shared_ptr<const PolicyTable> policies, uint32_t max_key_bytes,
                    std::shared_ptr<const ShardMap> shards = nullptr);

  absl::StatusOr<storage::Operation> Translate(const v1::ClaimRequest& request) const;
  absl::StatusOr<storage::Operation> Translate(const v1::CompleteRequest& request) const;
  absl::StatusOr<storage::Operation> Translate(const v1::ReleaseRequest& request) const;
  absl::StatusOr<storage::Operation> Translate(const v1::ExtendRequest& request) const;
  absl::StatusOr<storage::Operation> Translate(const v1::QueryRequest& request) const;
  // One item of a Batch; an empty Operation is INVALID_ARGUMENT.
  absl::StatusOr<storage::Operation> Translate(const v1::Operation& operation) const;

  // Validates the namespace and finds its policy.
  absl::StatusOr<const Policy*> Resolve(const std::string& ns) const;

 private:
  absl::StatusOr<const Policy*> ResolveKey(const std::string& ns, const std::string& key) const;

  const std::shared_ptr<const PolicyTable> policies_;
  const uint32_t max_key_bytes_;
  const std::shared_ptr<const ShardMap> shards_;
};

// The namespace a Batch item names; empty when it holds no operation.
const std::string& OperationNamespace(const v1::Operation& operation);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_REQUEST_TRANSLATOR_H_
