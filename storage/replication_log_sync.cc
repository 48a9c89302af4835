// ReplicationLog: how far each shard's log is known to be on disk
// (DurableSeq), and the syncs that move it (docs/replication.md §2, step
// 2). The appends themselves are in replication_log.cc.

#include <algorithm>

#include "storage/data_dir.h"
#include "storage/replication_log.h"

namespace dedup::storage {

absl::Status ReplicationLog::SyncAppends() {
  if (durability_ != Durability::kFsync) return absl::OkStatus();
  absl::Status checked = CheckSyncs();
  if (!checked.ok()) return checked;
  // Every write numbered so far returned before this sync began.
  const uint64_t covers = writes_.load();
  absl::Status synced = dir_->SyncWal("syncing the log");
  if (!synced.ok()) {
    // A write that failed on a full disk fences the sync off before it
    // starts (RESOURCE_EXHAUSTED, storage/wal_fence.h): nothing was lost,
    // and appends resume once the data directory recovers. Anything else
    // fails closed.
    if (!absl::IsResourceExhausted(synced)) sync_failed_ = true;
    return synced;
  }
  uint64_t seen = synced_writes_.load();
  while (seen < covers && !synced_writes_.compare_exchange_weak(seen, covers)) {
  }
  return absl::OkStatus();
}

uint64_t ReplicationLog::DurableSeq(uint32_t shard) const {
  const ShardLog& log = *shards_[shard];
  absl::MutexLock lock(&log.mu);
  return DurableSeqLocked(log);
}

uint64_t ReplicationLog::DurableSeqLocked(const ShardLog& log) const {
  if (durability_ != Durability::kFsync) return log.last.seq;
  const uint64_t synced = synced_writes_.load();
  while (!log.unsynced.empty() && log.unsynced.front().first <= synced) {
    log.durable_seq = std::max(log.durable_seq, log.unsynced.front().second);
    log.unsynced.pop_front();
  }
  return std::min(log.durable_seq, log.last.seq);
}

void ReplicationLog::NoteWritten(ShardLog& log, bool synced, uint64_t number,
                                 uint64_t replaced_from) {
  if (replaced_from > 0) {
    // The entries from `replaced_from` on are new: what was known of the
    // old ones says nothing of them.
    log.durable_seq = std::min(log.durable_seq, replaced_from - 1);
    log.unsynced.clear();
  }
  if (synced || durability_ != Durability::kFsync) {
    // A synced write syncs the whole WAL before it too.
    log.durable_seq = log.last.seq;
    log.unsynced.clear();
    return;
  }
  // Those a sync covered go first, so that the list holds only the writes
  // since the last sync on a shard nobody asks DurableSeq of (a follower's).
  DurableSeqLocked(log);
  log.unsynced.emplace_back(number, log.last.seq);
}

absl::Status ReplicationLog::CheckSyncs() const {
  if (!sync_failed_.load()) return absl::OkStatus();
  return absl::UnavailableError(
      "an earlier sync of the replication log failed, and the disk may have dropped what it "
      "held; this node appends nothing more until it restarts");
}

}  // namespace dedup::storage
