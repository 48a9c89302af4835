#include "shard_routes.h"

#include <utility>

#include "storage/key_codec.h"

namespace dedup::client {

ShardRoutes::ShardRoutes(std::string seed) : nodes_{std::move(seed)} {}

bool ShardRoutes::Adopt(const v1::TopologyResponse& map, const std::string& answered) {
  std::vector<std::string> nodes(map.nodes().begin(), map.nodes().end());
  const bool single =
      map.shard_count() == 0 || nodes.empty() || (nodes.size() == 1 && map.leaders().empty());
  if (single) {
    const bool changed = shard_count_ != 0 || nodes_ != std::vector<std::string>{answered};
    shard_count_ = 0;
    nodes_ = {answered};
    leaders_.clear();
    return changed;
  }

  std::vector<Leader> leaders;
  if (!map.leaders().empty()) {
    leaders.resize(map.shard_count());
    for (const v1::ShardLeader& shard : map.leaders()) {
      if (shard.shard() >= map.shard_count()) continue;
      Leader& leader = leaders[shard.shard()];
      leader.epoch = shard.epoch();
      const bool known = shard.leader() >= 0 && static_cast<size_t>(shard.leader()) < nodes.size();
      leader.node = known ? shard.leader() : -1;
    }
  }
  const bool same_shape = shard_count_ == map.shard_count() && nodes_ == nodes;
  if (same_shape && leaders.size() == leaders_.size()) {
    // An answer from a node that has not yet seen the latest elections
    // must not send keys back to the leaders they replaced.
    for (size_t shard = 0; shard < leaders.size(); ++shard) {
      if (leaders[shard].epoch < leaders_[shard].epoch) leaders[shard] = leaders_[shard];
    }
  }
  bool changed = !same_shape || leaders.size() != leaders_.size();
  for (size_t shard = 0; !changed && shard < leaders.size(); ++shard) {
    changed = leaders[shard].node != leaders_[shard].node;
  }
  shard_count_ = map.shard_count();
  nodes_ = std::move(nodes);
  leaders_ = std::move(leaders);
  return changed;
}

size_t ShardRoutes::NodeFor(absl::string_view ns, absl::string_view key) const {
  if (shard_count_ == 0) return 0;
  const uint32_t shard = storage::ShardOf(ns, key, shard_count_);
  if (!leaders_.empty() && leaders_[shard].node >= 0) return leaders_[shard].node;
  return OwnerOf(shard);
}

size_t ShardRoutes::OwnerOf(uint32_t shard) const {
  return storage::NodeOfShard(shard, static_cast<uint32_t>(nodes_.size()));
}

}  // namespace dedup::client
