#include "storage/shard_replicator.h"

#include <utility>

#include "absl/synchronization/notification.h"

namespace dedup::storage {

std::vector<absl::Status> ShardReplicator::Commit(std::vector<ShardWrite> writes) {
  std::vector<absl::Status> outcome;
  absl::Notification decided;
  CommitAsync(std::move(writes), [&](std::vector<absl::Status> statuses) {
    outcome = std::move(statuses);
    decided.Notify();
  });
  decided.WaitForNotification();
  return outcome;
}

}  // namespace dedup::storage
