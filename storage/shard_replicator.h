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

#include "absl/functional/any_invocable.h"
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

  // Called once with one status per write of a CommitAsync, in order.
  using CommitDone = absl::AnyInvocable<void(std::vector<absl::Status>) &&>;

  // Appends each write to its shard's log and returns. Once a majority of
  // each shard's replicas has persisted its write and the write is applied
  // to this node's records, `done` runs with OK for it; one status per
  // write, in order. A write that is not committed in time answers
  // UNAVAILABLE: it may still take effect later, as any unanswered write
  // may. `done` runs on whichever thread learns the last outcome (a
  // replication thread, or this one when every write fails at once): it
  // must not block. Called with the writes' stripe locks held, which the
  // caller keeps until `done`.
  virtual void CommitAsync(std::vector<ShardWrite> writes, CommitDone done) = 0;

  // CommitAsync, waiting for its outcome.
  std::vector<absl::Status> Commit(std::vector<ShardWrite> writes);
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_SHARD_REPLICATOR_H_
