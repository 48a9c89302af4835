// The Replicator as a leader committing writes (docs/replication.md §2,
// step 4): the commit point, writes waiting for it without a thread, and
// their outcome.

#include "server/cluster/replicator.h"
#include "server/cluster/replicator_internal.h"

namespace dedup::server::cluster {

void Replicator::AdvanceCommit(Shard* shard) {
  // Only voters count (MajorityHolds): a learner (a move's target) may hold
  // less than a majority of voters does, and an entry acknowledged by it
  // alone would not survive the loss of this leader.
  // This node's own copy counts only as far as a sync covers it (in fsync
  // durability; LogSyncLoop): a crash loses the rest, and with it an entry
  // a majority would have been said to hold.
  const uint64_t durable = log_->DurableSeq(shard->index);
  const uint64_t majority_holds = core::MajorityHolds(
      shard->voters, [&](uint32_t node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) -> uint64_t {
        if (node == options_.self) return durable;
        auto it = shard->peers.find(node);
        return it == shard->peers.end() ? 0 : it->second.match_seq;
      });
  shard->commit_seq = core::NextCommit(shard->commit_seq, majority_holds, shard->epoch_start_seq);
}

void Replicator::CommitAsync(std::vector<storage::ShardWrite> writes, CommitDone done) {
  auto call = std::make_shared<CommitCall>();
  call->done = std::move(done);
  std::vector<absl::Status> results(writes.size());
  std::vector<uint64_t> epochs(writes.size(), 0);
  const absl::Status storage_health = store_->BackgroundError();
  // One append for every shard of the call. In fsync durability it is not
  // synced here: LogSyncLoop syncs it with every other append waiting, so
  // that no thread that decides calls waits for the disk.
  const bool sync_later = store_->durability() == storage::Durability::kFsync;
  std::vector<storage::ReplicationLog::ShardAppend> appends;
  std::vector<size_t> appended_writes;
  std::vector<NewEntries> new_entries;
  for (size_t i = 0; i < writes.size(); ++i) {
    Shard& shard = *shards_[writes[i].shard];
    if (!storage_health.ok()) {
      results[i] = absl::UnavailableError(storage_health.message());
      continue;
    }
    absl::MutexLock lock(&shard.mu);
    if (!shard.leading || !shard.serving) {
      results[i] = absl::UnavailableError(
          absl::StrCat("shard ", shard.index, " lost its leader before the write; retry"));
      continue;
    }
    epochs[i] = shard.lead_epoch;
    appends.push_back({shard.index, epochs[i], std::move(writes[i].batch)});
    appended_writes.push_back(i);
    NewEntries& due = new_entries.emplace_back();
    due.shard = shard.index;
    for (const auto& [node, peer] : shard.peers) due.peers.push_back(node);
  }
  absl::StatusOr<std::vector<LogPosition>> appended = std::vector<LogPosition>();
  if (!appends.empty()) appended = log_->AppendAll(appends, /*sync=*/!sync_later);
  if (!appended.ok()) {
    for (size_t i : appended_writes)
      results[i] = absl::UnavailableError(appended.status().message());
    appended_writes.clear();
  }
  if (appended_writes.empty()) {
    std::move(call->done)(std::move(results));
    return;
  }
  {
    absl::MutexLock lock(&call->mu);
    call->results = std::move(results);
    call->undecided = appended_writes.size();
  }
  const absl::Time deadline = absl::Now() + options_.lease_ttl;
  std::vector<Shard*> shards;
  std::vector<PendingCommit> stale;
  for (size_t k = 0; k < appended_writes.size(); ++k) {
    const size_t i = appended_writes[k];
    const LogPosition position = (*appended)[k];
    Shard* shard = shards_[writes[i].shard].get();
    shards.push_back(shard);
    absl::MutexLock lock(&shard->mu);
    auto [slot, inserted] = shard->pending.try_emplace(position.seq);
    if (!inserted) {
      // A write of an earlier leadership of this node's at the same
      // position, cut from the log since and not yet failed: it never
      // committed.
      stale.push_back(std::move(slot->second));
      slot->second = PendingCommit();
      pending_commits_.fetch_sub(1, std::memory_order_relaxed);
    }
    PendingCommit& pending = slot->second;
    pending.epoch = epochs[i];
    pending.entry = {position.epoch, position.seq, std::move(appends[k].batch)};
    pending.deadline = deadline;
    pending.call = call;
    pending.index = i;
    pending_commits_.fetch_add(1, std::memory_order_relaxed);
  }
  KickShippers(new_entries);
  if (sync_later) SyncLogSoon(shards);
  for (PendingCommit& write : stale) {
    DecideWrite(write.call, write.index, absl::UnavailableError(kNotCommitted));
  }
  // A shipping round that began before the writes were pending may have
  // committed them already; and a leadership may have ended meanwhile.
  CompleteCommits(shards);
}

void Replicator::DecideWrite(const std::shared_ptr<CommitCall>& call, size_t index,
                             absl::Status status) {
  std::vector<absl::Status> results;
  {
    absl::MutexLock lock(&call->mu);
    call->results[index] = std::move(status);
    if (--call->undecided > 0) return;
    results = std::move(call->results);
  }
  // Decided whole: this thread is the last to touch the call's writes.
  std::move(call->done)(std::move(results));
}

void Replicator::CompleteCommits(const std::vector<Shard*>& shards) {
  struct Decided {
    std::shared_ptr<CommitCall> call;
    size_t index;
    absl::Status status;
  };
  std::vector<Decided> decided;
  // The committed writes, by shard, applied together below: one RocksDB
  // write for every shard.
  struct Committed {
    Shard* shard;
    std::vector<storage::LogEntry> entries;
    std::vector<PendingCommit> writes;
    uint64_t epoch;
  };
  std::vector<Committed> committed;
  std::vector<std::pair<uint32_t, uint64_t>> released;  // Leader keys to give up.
  const absl::Time now = absl::Now();
  const bool stopped = stopped_.load();
  std::vector<Shard*> distinct = shards;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (Shard* shard : distinct) {
    absl::MutexLock lock(&shard->mu);
    if (shard->pending.empty()) continue;
    Committed* ready = nullptr;
    for (auto it = shard->pending.begin(); it != shard->pending.end();) {
      PendingCommit& pending = it->second;
      const bool leading_it = shard->leading && shard->lead_epoch == pending.epoch;
      const bool same_leadership = !stopped && leading_it;
      if (same_leadership && shard->commit_seq >= it->first) {
        if (ready == nullptr) {
          ready = &committed.emplace_back();
          ready->shard = shard;
          ready->epoch = pending.epoch;
        }
        ready->entries.push_back(std::move(pending.entry));
        ready->writes.push_back(std::move(pending));
      } else if (!same_leadership || now >= pending.deadline) {
        if (leading_it) {
          // The entry may still be committed by a later leader, after
          // writes this node would decide without it: only a new
          // election, which applies everything committed first, may serve
          // the shard again. So before its stripe locks are given back,
          // stopping too.
          StepDown(shard,
                   stopped ? "stopping" : "a write was not acknowledged by a majority in time");
          released.emplace_back(shard->index, pending.epoch);
        }
        // Otherwise whatever stepped down gives up the leader key. A
        // hand-off in particular replaces it with the handoff key in one
        // transaction; deleting it first would leave the target unnamed,
        // to wait out the old leader's read lease (over a second).
        decided.push_back(
            {std::move(pending.call), pending.index,
             absl::UnavailableError(absl::StrCat("shard ", shard->index, ": ", kNotCommitted))});
      } else {
        break;  // Neither committed nor due; nor, mostly, are those after it.
      }
      it = shard->pending.erase(it);
      pending_commits_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (!committed.empty()) {
    std::vector<storage::ReplicationLog::ShardApply> applies;
    applies.reserve(committed.size());
    for (const Committed& c : committed) {
      applies.push_back({c.shard->index, c.entries.back().seq, absl::MakeConstSpan(c.entries)});
    }
    const std::vector<absl::Status> applied = log_->ApplyAll(applies);
    const bool lease_valid = LeaseValid();
    for (size_t k = 0; k < committed.size(); ++k) {
      Committed& c = committed[k];
      absl::Status status = applied[k];
      if (!status.ok()) {
        // Committed, but not in this node's records: decisions from them
        // would miss it. A new election applies everything committed first.
        absl::MutexLock lock(&c.shard->mu);
        if (c.shard->leading && c.shard->lead_epoch == c.epoch) {
          StepDown(c.shard,
                   absl::StrCat("a committed write could not be applied: ", status.message()));
          released.emplace_back(c.shard->index, c.epoch);
        }
      } else if (!lease_valid) {
        // A node paused past its lease may have been replaced while it
        // waited: it answers nothing more. The entry is on a majority, so
        // every later leader holds it.
        status = absl::UnavailableError(absl::StrCat(
            "shard ", c.shard->index,
            ": this node's leadership lease ran out before it could answer; the write is on a "
            "majority of the replicas and takes effect, retry"));
      }
      for (PendingCommit& write : c.writes) {
        decided.push_back({std::move(write.call), write.index, status});
      }
    }
  }
  if (!released.empty()) {
    absl::MutexLock lock(&sweep_mu_);
    keys_to_release_.insert(keys_to_release_.end(), released.begin(), released.end());
  }
  for (Decided& d : decided) DecideWrite(d.call, d.index, std::move(d.status));
}

void Replicator::SweepCommitsSoon() {
  absl::MutexLock lock(&sweep_mu_);
  sweep_due_ = true;
}

void Replicator::CommitSweepLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&sweep_mu_);
      sweep_mu_.AwaitWithTimeout(absl::Condition(&sweep_due_), absl::Milliseconds(100));
      sweep_due_ = false;
    }
    // Read first: the pass after Stop fails every write still pending,
    // and a write made pending later is failed by its own CommitAsync.
    const bool stopping = stopped_.load();
    if (stopping || pending_commits_.load(std::memory_order_relaxed) > 0) {
      std::vector<Shard*> shards;
      for (auto& shard : shards_) {
        absl::MutexLock lock(&shard->mu);
        if (!shard->pending.empty()) shards.push_back(shard.get());
      }
      CompleteCommits(shards);
    }
    if (stopping) return;
  }
}

void Replicator::SyncLogSoon(const std::vector<Shard*>& shards) {
  absl::MutexLock lock(&log_sync_mu_);
  to_sync_.insert(to_sync_.end(), shards.begin(), shards.end());
}

void Replicator::LogSyncLoop() {
  // The last sync's error, logged when it changes: a failed sync fails
  // every one after it the same way.
  absl::StatusCode last_error = absl::StatusCode::kOk;
  for (;;) {
    std::vector<Shard*> shards;
    std::vector<ShipWaiter> ships;
    {
      absl::MutexLock lock(&log_sync_mu_);
      auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_sync_mu_) {
        return !to_sync_.empty() || !ship_waiters_.empty() || log_sync_stopping_;
      };
      log_sync_mu_.Await(absl::Condition(&due));
      if (to_sync_.empty() && ship_waiters_.empty()) return;  // Stopping, and nothing waits.
      shards.swap(to_sync_);
      ships.swap(ship_waiters_);
    }
    // Every append waiting was written before it was asked for.
    const absl::Status synced = log_->SyncAppends();
    if (!synced.ok()) LogSyncFailed(synced);
    // A follower answers only what is on its disk.
    for (ShipWaiter& ship : ships) {
      if (synced.ok()) {
        std::move(ship.done)(std::move(ship.response));
      } else {
        std::move(ship.done)(absl::InternalError(synced.message()));
      }
    }
    if (!synced.ok()) {
      // Their writes may still commit on the followers' copies; those that
      // do not time out, and this node steps down (CompleteCommits).
      if (synced.code() != last_error) {
        LogEvent(spdlog::level::err, "cannot sync the replication log",
                 {{"error", synced.message()}});
      }
      last_error = synced.code();
      continue;
    }
    last_error = absl::StatusCode::kOk;
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    for (Shard* shard : shards) {
      absl::MutexLock lock(&shard->mu);
      if (shard->leading) AdvanceCommit(shard);
    }
    CompleteCommits(shards);
  }
}

void Replicator::LogSyncFailed(const absl::Status& status) {
  // A full disk fenced the sync off before it began: nothing was lost,
  // and the store recovers once space returns.
  if (absl::IsResourceExhausted(status)) return;
  // The log and the records share one WAL: the store's writes may be lost
  // too. It fails closed, and its health (/healthz) with it, so that the
  // node is restarted rather than leading shards it cannot write.
  store_->FailClosed(status);
}

void Replicator::ReleaseKeysLoop() {
  for (;;) {
    std::vector<std::pair<uint32_t, uint64_t>> release;
    {
      absl::MutexLock lock(&sweep_mu_);
      auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sweep_mu_) {
        return !keys_to_release_.empty() || release_stopping_;
      };
      sweep_mu_.Await(absl::Condition(&due));
      // Stop revokes the lease, which takes the rest with it.
      if (release_stopping_) return;
      release.swap(keys_to_release_);
    }
    for (const auto& [s, epoch] : release) ReleaseLeaderKey(s, epoch);
  }
}

}  // namespace dedup::server::cluster
