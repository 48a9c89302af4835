#ifndef DEDUP_CLIENT_SRC_SHARD_ROUTES_H_
#define DEDUP_CLIENT_SRC_SHARD_ROUTES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup::client {

// Which node each key goes to, from the cluster maps (TopologyResponse) the
// client has been given. Three kinds of map:
//  - a single node (no node list, or one node and no leaders): it owns
//    every key;
//  - static sharding (`leaders` empty): a key's shard goes to
//    nodes[NodeOfShard(shard, n)], the rule the server checks;
//  - replicated (`leaders` set): a key's shard goes to its leader, and to
//    the static owner while it has none (that node answers UNAVAILABLE or
//    FAILED_PRECONDITION, and the call is retried).
//
// Nodes answer from what they last read of the cluster, so an answer can be
// older than the map already held. A shard's leader is therefore replaced
// only by one of an equal or higher epoch, as long as the shard count and
// node list stay the same; a map with another shard count or node list
// replaces the whole map. (The map's `version` is a hash and says which map
// is different, not which is newer, so the epochs decide.)
//
// Not thread-safe: Topology holds it under its lock.
class ShardRoutes {
 public:
  // Before any map: `seed` owns every key.
  explicit ShardRoutes(std::string seed);

  // Takes in `map`, answered by the node at `answered`. Returns true when
  // the node of some key changed (or the node list did).
  bool Adopt(const v1::TopologyResponse& map, const std::string& answered);

  // The index in nodes() of the node to send (ns, key) to.
  size_t NodeFor(absl::string_view ns, absl::string_view key) const;

  // Every node of the map, by index; never empty.
  const std::vector<std::string>& nodes() const { return nodes_; }

 private:
  struct Leader {
    int32_t node = -1;  // Index in nodes_; -1 while the shard has none.
    uint64_t epoch = 0;
  };

  // The static owner of `shard`.
  size_t OwnerOf(uint32_t shard) const;

  uint32_t shard_count_ = 0;  // 0: one node owns every key.
  std::vector<std::string> nodes_;
  std::vector<Leader> leaders_;  // By shard; empty unless replicated.
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_SHARD_ROUTES_H_
