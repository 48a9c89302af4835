#ifndef DEDUP_STORAGE_SHARD_REPLICATOR_H_
#define DEDUP_STORAGE_SHARD_REPLICATOR_H_

// What the store asks of a replicated cluster (docs/replication.md §2):
// whether this node may answer for a shard now, the shard's next fencing
// token, and the commit of a shard's writes on a majority of its replicas.
// The store decides exactly as a single node does; a replicator only
// changes where the decided writes go and when they count as done.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dedup::storage {

// The writes one Store::Apply decided for one shard: the representation
// of a RocksDB WriteBatch whose operations name no column family.
struct ShardWrite {
  uint32_t shard = 0;
  std::string batch;
};

class ShardReplicator {
 public:
  virtual ~ShardReplicator() = default;

  // OK when this node leads `shard` and its leadership is certainly still
  // its own (its lease has not run out), so that it may answer from the
  // shard's records. Otherwise FAILED_PRECONDITION naming the leader it
  // knows, or UNAVAILABLE while the shard has none.
  virtual absl::Status CheckLeading(uint32_t shard) = 0;

  // A fencing token of `shard` above every token any leader of the shard
  // has handed out before. Only while leading.
  virtual absl::StatusOr<uint64_t> NextToken(uint32_t shard) = 0;

  // Appends each write to its shard's log, waits until a majority of the
  // shard's replicas has persisted it, applies it to this node's records
  // and answers OK; one status per write, in order. A write that is not
  // committed in time answers UNAVAILABLE: it may still take effect later,
  // as any unanswered write may. Called with the writes' stripe locks held.
  virtual std::vector<absl::Status> Commit(std::vector<ShardWrite> writes) = 0;
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_SHARD_REPLICATOR_H_
