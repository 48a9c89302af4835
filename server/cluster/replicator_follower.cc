// The Replicator as a follower and a voter: the Replication service's
// calls (appends, promises, log reads and restores).

#include "server/cluster/replicator.h"
#include "server/cluster/replicator_internal.h"

namespace dedup::server::cluster {

rv1::AppendResponse Replicator::AppendAnswer(uint32_t s, rv1::AppendResponse::Result result) const {
  rv1::AppendResponse response;
  response.set_result(result);
  ToProto(log_->Last(s), response.mutable_last());
  ToProto(log_->Applied(s), response.mutable_applied());
  response.set_promised(log_->Promised(s));
  return response;
}

bool Replicator::BeginAppend(Shard& shard, const rv1::AppendRequest& request,
                             FollowerAppend* append) {
  const uint32_t s = shard.index;
  if (!shard.replica) {
    // A move's target that has not read its new placement yet, or a
    // replica moved off: either way nothing is appended here.
    append->response.set_result(rv1::AppendResponse::NOT_REPLICA);
    return false;
  }
  if (request.epoch() < log_->Promised(s)) {
    ++fenced_appends_;
    append->response = AppendAnswer(s, rv1::AppendResponse::FENCED);
    return false;
  }
  // The leader counts this answer towards its read lease, whatever it is
  // (core::Stickiness).
  shard.heard_leader = static_cast<int32_t>(request.leader());
  shard.heard_epoch = request.epoch();
  shard.heard_ns = SteadyNowNs();
  if (shard.leading && request.epoch() >= shard.lead_epoch) {
    StepDown(&shard, absl::StrCat("node ", request.leader(), " leads epoch ", request.epoch()));
  }
  shard.leader = static_cast<int32_t>(request.leader());
  shard.epoch = std::max(shard.epoch, request.epoch());
  shard.leaderless_since = absl::InfiniteFuture();
  append->entries.reserve(request.entries_size());
  for (const rv1::Entry& e : request.entries()) {
    append->entries.push_back({e.epoch(), e.seq(), e.batch()});
  }
  append->prev = FromProto(request.prev());
  return true;
}

void Replicator::FinishAppend(Shard& shard, const rv1::AppendRequest& request,
                              absl::Status appended, FollowerAppend* append) {
  const uint32_t s = shard.index;
  const LogPosition prev = append->prev;
  if (absl::IsFailedPrecondition(appended)) {
    ++fenced_appends_;
    append->response = AppendAnswer(s, rv1::AppendResponse::FENCED);
    return;
  }
  if (absl::IsAborted(appended)) {
    append->response = AppendAnswer(s, rv1::AppendResponse::MISMATCH);
    return;
  }
  if (!appended.ok()) {
    LogEvent(spdlog::level::err, "cannot append the leader's entries",
             {{"shard", absl::StrCat(s)}, {"error", appended.message()}});
    append->response = AppendAnswer(s, rv1::AppendResponse::MISMATCH);
    return;
  }
  // What is committed and certainly the leader's: up to the last entry it
  // sent (a longer tail here may be an older epoch's). Applied in batches
  // (kFollowerApplyEntries), and on every heartbeat.
  const uint64_t apply_to =
      std::min<uint64_t>(request.commit_seq(), prev.seq + append->entries.size());
  const uint64_t applied_seq = log_->Applied(s).seq;
  if (apply_to > applied_seq &&
      (append->entries.empty() || apply_to - applied_seq >= kFollowerApplyEntries)) {
    append->apply_to = apply_to;
  }
  const uint64_t trim_to = std::min<uint64_t>(request.trim_seq(), applied_seq);
  if (trim_to >= shard.trimmed + kTrimStep && log_->TrimThrough(s, trim_to).ok()) {
    shard.trimmed = trim_to;
  }
  if (shard.restoring && prev.seq == 0) {
    // A copy that its leader abandoned (it stepped down): this leader
    // sends its whole log instead, which rebuilds every record.
    shard.restoring = false;
  }
  if (shard.learner && !shard.restoring &&
      prev.seq + append->entries.size() >= request.commit_seq()) {
    // It holds every entry committed so far, as this leader's own: it may
    // vote again once its etcd key is gone (ClearCaughtUpLearners).
    shard.learner_caught_up = true;
  }
  append->response = AppendAnswer(s, rv1::AppendResponse::APPENDED);
}

void Replicator::ApplyCommitted(std::vector<FollowerAppend>& appends) {
  std::vector<storage::ReplicationLog::ShardApply> applies;
  for (const FollowerAppend& append : appends) {
    if (append.apply_to > 0) {
      applies.push_back({append.shard, append.apply_to, absl::MakeConstSpan(append.entries)});
    }
  }
  if (applies.empty()) return;
  // Applies trail the log and are never waited for; an entry is applied
  // at most once, whoever applies it first (an election, or the next
  // call).
  const std::vector<absl::Status> applied = log_->ApplyAll(applies);
  for (size_t i = 0; i < applied.size(); ++i) {
    if (!applied[i].ok()) {
      LogEvent(spdlog::level::err, "cannot apply committed entries",
               {{"shard", absl::StrCat(applies[i].shard)}, {"error", applied[i].message()}});
    }
  }
  for (FollowerAppend& append : appends) {
    if (append.apply_to > 0)
      ToProto(log_->Applied(append.shard), append.response.mutable_applied());
  }
}

rv1::AppendResponse Replicator::HandleAppend(const rv1::AppendRequest& request, bool sync) {
  const uint32_t s = request.shard();
  if (s >= shards_.size()) {
    rv1::AppendResponse response;
    response.set_result(rv1::AppendResponse::FENCED);
    return response;
  }
  Shard& shard = *shards_[s];
  std::vector<FollowerAppend> appends(1);
  FollowerAppend& append = appends.front();
  append.shard = s;
  {
    absl::MutexLock lock(&shard.mu);
    if (BeginAppend(shard, request, &append)) {
      FinishAppend(shard, request,
                   log_->AppendAfter(s, request.epoch(), append.prev, append.entries, sync),
                   &append);
    }
  }
  ApplyCommitted(appends);
  return std::move(append.response);
}

absl::StatusOr<rv1::ShipResponse> Replicator::HandleShip(const rv1::ShipRequest& request) {
  bool entries = false;
  rv1::ShipResponse response = TakeShip(request, &entries);
  // Also when every entry was here already: an earlier call may have
  // written them and not synced them yet.
  if (entries) {
    absl::Status synced = log_->SyncAppends();
    if (!synced.ok()) {
      LogEvent(spdlog::level::err, "cannot sync the leader's entries",
               {{"error", synced.message()}});
      LogSyncFailed(synced);
      return absl::InternalError(synced.message());
    }
  }
  return response;
}

void Replicator::HandleShipAsync(const rv1::ShipRequest& request, ShipDone done) {
  bool entries = false;
  rv1::ShipResponse response = TakeShip(request, &entries);
  if (!entries || store_->durability() != storage::Durability::kFsync) {
    std::move(done)(std::move(response));
    return;
  }
  {
    absl::MutexLock lock(&log_sync_mu_);
    if (!log_sync_stopping_) {
      ship_waiters_.push_back({std::move(response), std::move(done)});
      return;
    }
  }
  // Stopping: the log-sync thread may have ended.
  absl::Status synced = log_->SyncAppends();
  if (!synced.ok()) {
    LogSyncFailed(synced);
    std::move(done)(absl::InternalError(synced.message()));
    return;
  }
  std::move(done)(std::move(response));
}

rv1::ShipResponse Replicator::TakeShip(const rv1::ShipRequest& request,
                                       bool* entries_out) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  rv1::ShipResponse response;
  const int n = request.appends_size();
  // Shards in ascending order, each at most once: otherwise one at a
  // time, as lone Appends.
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return request.appends(a).shard() < request.appends(b).shard(); });
  bool distinct = true;
  for (int k = 0; k < n && distinct; ++k) {
    const uint32_t s = request.appends(order[k]).shard();
    distinct = s < shards_.size() && (k == 0 || s != request.appends(order[k - 1]).shard());
  }
  bool entries = false;
  for (const rv1::AppendRequest& append : request.appends()) {
    entries = entries || append.entries_size() > 0;
  }
  if (!distinct) {
    for (const rv1::AppendRequest& append : request.appends()) {
      *response.add_results() = HandleAppend(append, /*sync=*/false);
    }
  } else {
    // Every shard of the call is locked (in ascending order, as nothing
    // else holds two shards' locks) while its entries go into one write of
    // the log, so that each shard's answer matches what is written.
    std::vector<FollowerAppend> appends(n);
    for (int i : order) shards_[request.appends(i).shard()]->mu.Lock();
    std::vector<storage::ReplicationLog::FollowerAppend> staged;
    std::vector<int> staged_index;
    for (int i = 0; i < n; ++i) {
      const rv1::AppendRequest& r = request.appends(i);
      appends[i].shard = r.shard();
      if (!BeginAppend(*shards_[r.shard()], r, &appends[i])) continue;
      staged.push_back(
          {r.shard(), r.epoch(), appends[i].prev, absl::MakeConstSpan(appends[i].entries)});
      staged_index.push_back(i);
    }
    const std::vector<absl::Status> appended = log_->AppendAfterAll(staged, /*sync=*/false);
    for (size_t k = 0; k < staged_index.size(); ++k) {
      const int i = staged_index[k];
      FinishAppend(*shards_[request.appends(i).shard()], request.appends(i), appended[k],
                   &appends[i]);
    }
    for (int i : order) shards_[request.appends(i).shard()]->mu.Unlock();
    ApplyCommitted(appends);
    for (FollowerAppend& append : appends) response.add_results()->Swap(&append.response);
  }
  TakeHandOffNotices(request);
  *entries_out = entries;
  return response;
}

rv1::PromiseResponse Replicator::HandlePromise(const rv1::PromiseRequest& request) {
  rv1::PromiseResponse response;
  const uint32_t s = request.shard();
  if (s >= shards_.size() || !shards_[s]->replica) {
    response.set_reason(absl::StrCat("this node holds no replica of shard ", s));
    return response;
  }
  Shard& shard = *shards_[s];
  absl::MutexLock lock(&shard.mu);
  response.set_promised_epoch(log_->Promised(s));
  ToProto(log_->Applied(s), response.mutable_applied());
  core::PromiseFacts facts;
  facts.epoch = request.epoch();
  facts.promised = log_->Promised(s);
  facts.voter = !shard.placed_learner && Holds(shard.voters, options_.self);
  facts.reseeding = shard.learner;
  facts.leading = (shard.leading || shard.electing) && LeaseValid();
  facts.sticky = Sticky(shard, request.candidate(), request.handoff_epoch());
  std::string refused;
  switch (core::DecidePromise(facts)) {
    case core::PromiseAnswer::kGrant:
    case core::PromiseAnswer::kPromisedLater:  // The log says why, below.
      break;
    case core::PromiseAnswer::kNotVoter:
      refused = "this replica is a learner of the shard (a move's target) and does not vote";
      break;
    case core::PromiseAnswer::kReseeding:
      refused = "this replica is re-seeding and may not vote yet";
      break;
    case core::PromiseAnswer::kLeading:
      refused = "this replica leads the shard";
      break;
    case core::PromiseAnswer::kSticky:
      refused = absl::StrCat("this replica heard from the leader of epoch ", shard.heard_epoch,
                             " too recently");
      break;
  }
  if (!refused.empty()) {
    response.set_reason(refused);
    ToProto(log_->Last(s), response.mutable_last());
    return response;
  }
  absl::StatusOr<LogPosition> promised = log_->Promise(s, request.epoch());
  if (!promised.ok()) {
    response.set_reason(std::string(promised.status().message()));
    ToProto(log_->Last(s), response.mutable_last());
    return response;
  }
  if (shard.leading && request.epoch() > shard.lead_epoch) {
    StepDown(&shard,
             absl::StrCat("promised epoch ", request.epoch(), " to node ", request.candidate()));
  }
  // The candidate is given time to finish before this replica contends
  // for the shard itself: two candidates asking at once both lose.
  shard.next_election = std::max(shard.next_election, absl::Now() + Tick(options_.lease_ttl) * 4);
  response.set_promised(true);
  response.set_promised_epoch(request.epoch());
  ToProto(*promised, response.mutable_last());
  return response;
}

absl::StatusOr<rv1::ReadLogResponse> Replicator::HandleReadLog(const rv1::ReadLogRequest& request) {
  const uint32_t s = request.shard();
  if (s >= shards_.size() || !shards_[s]->replica) {
    return absl::FailedPreconditionError(absl::StrCat("this node holds no replica of shard ", s));
  }
  absl::StatusOr<std::vector<LogEntry>> entries =
      log_->Read(s, request.from_seq(), std::clamp<uint64_t>(request.max_bytes(), 1, ship_bytes_));
  if (!entries.ok()) return entries.status();
  rv1::ReadLogResponse response;
  for (const LogEntry& e : *entries) {
    rv1::Entry* out = response.add_entries();
    out->set_epoch(e.epoch);
    out->set_seq(e.seq);
    out->set_batch(e.batch);
  }
  ToProto(log_->Last(s), response.mutable_last());
  return response;
}

rv1::RestoreResponse Replicator::HandleRestore(const rv1::RestoreRequest& request) {
  rv1::RestoreResponse response;
  const uint32_t s = request.shard();
  if (s >= shards_.size() || !shards_[s]->replica) {
    response.set_reason(absl::StrCat("this node holds no replica of shard ", s));
    return response;
  }
  Shard& shard = *shards_[s];
  auto fenced = [&]() {
    ++fenced_appends_;
    response.set_reason(
        absl::StrCat("epoch ", request.epoch(), " is fenced (promised ", log_->Promised(s), ")"));
    return response;
  };
  if (request.epoch() < log_->Promised(s)) return fenced();
  // A learner until caught up again, its records partial meanwhile: the
  // key is written before anything is dropped, and written anew by every
  // copy begun (so that a learner cleared meanwhile is a learner again).
  // Outside the shard lock: etcd may be slow.
  int64_t learner_revision = 0;
  if (request.begin()) {
    absl::StatusOr<int64_t> put =
        etcd_->Put(Key(absl::StrCat("learner/", options_.self, "/", s)), "re-seed");
    if (!put.ok()) {
      response.set_reason(
          absl::StrCat("cannot mark this replica a learner in etcd: ", put.status().message()));
      return response;
    }
    learner_revision = *put;
  }
  absl::MutexLock lock(&shard.mu);
  if (request.epoch() < log_->Promised(s)) return fenced();
  if (shard.leading) StepDown(&shard, absl::StrCat("node ", request.leader(), " re-seeds it"));
  shard.leader = static_cast<int32_t>(request.leader());
  shard.epoch = std::max(shard.epoch, request.epoch());
  absl::Status status;
  if (request.begin()) {
    shard.learner = true;
    shard.learner_caught_up = false;
    shard.learner_revision = learner_revision;
    status = log_->BeginRestore(s);
    if (status.ok()) {
      shard.restoring = true;
      shard.trimmed = 0;
      LogEvent(spdlog::level::info, "re-seeding shard from its leader",
               {{"shard", absl::StrCat(s)}, {"leader", absl::StrCat(request.leader())}});
    }
  } else if (!shard.restoring) {
    status = absl::FailedPreconditionError("no restore of this shard has begun here");
  }
  std::vector<std::pair<std::string, std::string>> records;
  records.reserve(request.records_size());
  for (const rv1::StoredRecord& r : request.records()) records.emplace_back(r.key(), r.value());
  if (status.ok()) status = log_->RestoreRecords(s, records);
  if (status.ok() && request.done()) {
    status = log_->FinishRestore(s, FromProto(request.position()));
    if (status.ok()) shard.restoring = false;
  }
  if (!status.ok()) {
    response.set_reason(std::string(status.message()));
    return response;
  }
  response.set_accepted(true);
  return response;
}

}  // namespace dedup::server::cluster
