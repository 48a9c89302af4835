#include "server/shard_map.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "storage/key_codec.h"

namespace dedup::server {
namespace {

uint64_t VersionOf(uint32_t shard_count, const std::vector<std::string>& nodes) {
  std::string text = absl::StrCat(shard_count);
  for (const std::string& node : nodes) absl::StrAppend(&text, ",", node);
  return storage::KeyHash("topology", text);
}

}  // namespace

ShardMap::ShardMap(uint32_t shard_count, std::vector<std::string> nodes, uint32_t self)
    : shard_count_(shard_count),
      nodes_(std::move(nodes)),
      self_(self),
      version_(VersionOf(shard_count_, nodes_)) {}

uint32_t ShardMap::OwnerOfShard(uint32_t shard) const {
  return nodes_.empty() ? self_ : storage::NodeOfShard(shard, static_cast<uint32_t>(nodes_.size()));
}

absl::Status ShardMap::CheckOwned(absl::string_view ns, absl::string_view key) const {
  if (nodes_.size() <= 1) return absl::OkStatus();
  const uint32_t shard = storage::ShardOf(ns, key, shard_count_);
  const uint32_t owner = OwnerOfShard(shard);
  if (owner == self_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("key belongs to shard ", shard, ", owned by node ", owner, " at ", nodes_[owner],
                   "; this is node ", self_, " (fetch the Topology and send it there)"));
}

}  // namespace dedup::server
