#ifndef DEDUP_SERVER_SHARD_MAP_H_
#define DEDUP_SERVER_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dedup::server {

// Which node of the cluster owns which key (design.md §8): node i of n owns
// the shards s with s mod n == i. A single node (no node list) owns every
// shard. Immutable; thread-safe.
class ShardMap {
 public:
  // `nodes` empty: a single node.
  ShardMap(uint32_t shard_count, std::vector<std::string> nodes, uint32_t self);

  // OK when this node owns (ns, key); otherwise FAILED_PRECONDITION naming
  // the shard and the owner's address, so a client can re-route.
  absl::Status CheckOwned(absl::string_view ns, absl::string_view key) const;

  uint32_t OwnerOfShard(uint32_t shard) const;
  uint32_t shard_count() const { return shard_count_; }
  const std::vector<std::string>& nodes() const { return nodes_; }
  uint32_t self() const { return self_; }
  // Changes whenever the shard count or the node list changes.
  uint64_t version() const { return version_; }

 private:
  const uint32_t shard_count_;
  const std::vector<std::string> nodes_;
  const uint32_t self_;
  const uint64_t version_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_SHARD_MAP_H_
