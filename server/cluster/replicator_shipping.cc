// The Replicator as a leader (docs/replication.md §2, §4): committing
// writes, shipping the log to followers, the commit point, trimming and
// re-seeding.

#include "server/cluster/replicator.h"
#include "server/cluster/replicator_internal.h"

namespace dedup::server::cluster {

void Replicator::TrimLogs() {
  for (auto& shard_ptr : shards_) {
    Shard& shard = *shard_ptr;
    if (!shard.replica) continue;
    uint64_t through;
    {
      absl::MutexLock lock(&shard.mu);
      if (!shard.leading) continue;
      const uint64_t applied = log_->Applied(shard.index).seq;
      const uint64_t last = log_->Last(shard.index).seq;
      uint64_t held = applied;
      for (const auto& [node, peer] : shard.peers) held = std::min(held, peer.match_seq);
      if (last > kLogRetention) held = std::max(held, std::min(applied, last - kLogRetention));
      shard.trim_seq = held;
      if (held < shard.trimmed + kTrimStep) continue;
      through = held;
    }
    absl::Status trimmed = log_->TrimThrough(shard.index, through);
    absl::MutexLock lock(&shard.mu);
    if (trimmed.ok()) shard.trimmed = std::max(shard.trimmed, through);
  }
}

void Replicator::EnsureShippers() {
  std::vector<std::pair<uint32_t, uint32_t>> wanted;
  for (auto& shard : shards_) {
    if (!shard->replica) continue;
    absl::MutexLock lock(&shard->mu);
    for (const std::vector<uint32_t>* nodes : {&shard->voters, &shard->learners}) {
      for (uint32_t node : *nodes) {
        if (node != options_.self) wanted.emplace_back(shard->index, node);
      }
    }
  }
  absl::MutexLock lock(&shippers_mu_);
  if (stopped_.load()) return;
  for (const auto& pair : wanted) {
    const uint32_t peer = pair.second;
    if (!shipping_.insert(peer).second) continue;
    shippers_.emplace_back([this, peer] {
      storage::NameThisThread(absl::StrCat("ship-to-", peer));
      ShipLoop(peer);
    });
  }
}

Replicator::ShipPlan Replicator::PlanAppend(Shard* shard, uint32_t peer, size_t max_bytes,
                                            bool heartbeat, bool from_shared_loop, Outgoing* out) {
  const uint32_t s = shard->index;
  uint64_t next;
  {
    absl::MutexLock lock(&shard->mu);
    if (stopped_.load() || !shard->replica.load() ||
        !(Holds(shard->voters, peer) || Holds(shard->learners, peer))) {
      return ShipPlan::kGone;
    }
    if (!shard->leading) return ShipPlan::kIdle;
    if (!shard->electing && (!LeaseValid() || shard->lead_lease != lease_id_.load())) {
      // Heartbeats from a leader whose lease has run out would keep its
      // followers from standing for election, while it may serve nothing.
      // This does not wait for the coordinating loop, which may be held
      // up by calls to an etcd it cannot reach.
      StepDown(shard, "this node could not renew its etcd lease in time");
      return ShipPlan::kIdle;
    }
    if (from_shared_loop && shard->dedicated.count(peer)) return ShipPlan::kIdle;
    out->to_learner = Holds(shard->learners, peer);
    if (from_shared_loop && out->to_learner) return ShipPlan::kDedicate;
    next = shard->peers[peer].next_seq;
    if (!heartbeat && next > log_->Last(s).seq) return ShipPlan::kIdle;
    out->shard = shard;
    out->epoch = shard->lead_epoch;
    out->sent_ns = SteadyNowNs();
    out->request.Clear();
    out->request.set_shard(s);
    out->request.set_epoch(shard->lead_epoch);
    out->request.set_leader(options_.self);
    out->request.set_commit_seq(shard->commit_seq);
    out->request.set_trim_seq(shard->trim_seq);
  }
  // The entry before `next` and what follows it.
  LogPosition prev;
  std::vector<LogEntry> entries;
  const LogPosition last = log_->Last(s);
  if (next > 1 && last.seq == next - 1) {
    // A heartbeat to a follower that has everything: no read (with
    // hundreds of shards, most of them idle, these are most calls).
    prev = last;
  } else if (next > 1) {
    absl::StatusOr<std::vector<LogEntry>> read = log_->Read(s, next - 1, max_bytes);
    if (!read.ok()) return ShipPlan::kRetry;
    if (!read->empty() && read->front().seq == next - 1) {
      prev = read->front().position();
      entries.assign(std::make_move_iterator(read->begin() + 1),
                     std::make_move_iterator(read->end()));
    } else if (log_->Applied(s).seq == next - 1) {
      prev = log_->Applied(s);
      absl::StatusOr<std::vector<LogEntry>> rest = log_->Read(s, next, max_bytes);
      if (!rest.ok()) return ShipPlan::kRetry;
      entries = std::move(*rest);
    } else {
      // The follower needs entries this log no longer holds (trimmed).
      return ShipPlan::kReseed;
    }
  } else {
    // From the very start: a follower with nothing (a new volume).
    absl::StatusOr<std::vector<LogEntry>> read = log_->Read(s, 1, max_bytes);
    if (!read.ok()) return ShipPlan::kRetry;
    if (!read->empty() && read->front().seq == 1) {
      entries = std::move(*read);
    } else if (!read->empty() || log_->Applied(s).seq > 0) {
      return ShipPlan::kReseed;
    }  // Otherwise a heartbeat: nothing written yet.
  }
  // Never past what this log held when `next` was read: entries of a
  // later epoch cannot be here, as only this leader appends.
  out->prev = prev;
  out->entries = entries.size();
  ToProto(prev, out->request.mutable_prev());
  out->entry_bytes = 0;
  for (LogEntry& e : entries) {
    out->entry_bytes += e.batch.size();
    rv1::Entry* entry = out->request.add_entries();
    entry->set_epoch(e.epoch);
    entry->set_seq(e.seq);
    entry->set_batch(std::move(e.batch));
  }
  out->bytes = out->request.ByteSizeLong();
  return ShipPlan::kSend;
}

bool Replicator::TakeAppendResult(const Outgoing& sent, uint32_t peer, grpc::Status status,
                                  const rv1::AppendResponse& response, bool* more) {
  Shard* shard = sent.shard;
  absl::MutexLock lock(&shard->mu);
  if (!shard->leading || shard->lead_epoch != sent.epoch) return false;
  if (!shard->peers.count(peer)) return false;  // No longer placed.
  Peer& p = shard->peers[peer];
  if (status.ok()) HeardFrom(peer);
  if (status.ok() && response.result() == rv1::AppendResponse::NOT_REPLICA) {
    // It has not seen the placement that adds it yet: again at the next
    // heartbeat.
    return false;
  }
  if (!status.ok()) return false;
  p.sent_bytes += sent.bytes;
  if (p.live_since == absl::InfiniteFuture() ||
      absl::Now() - p.last_heard > Tick(options_.lease_ttl) * 2) {
    p.live_since = absl::Now();
  }
  p.last_heard = absl::Now();
  p.applied_seq = response.applied().seq();
  if (response.result() == rv1::AppendResponse::APPENDED ||
      response.result() == rv1::AppendResponse::MISMATCH) {
    // It had promised no later epoch when it answered (§3, reads).
    p.acked_sent_ns = std::max(p.acked_sent_ns, sent.sent_ns);
  }
  const uint64_t next = sent.prev.seq + 1;
  switch (response.result()) {
    case rv1::AppendResponse::APPENDED:
      p.match_seq = std::max(p.match_seq, sent.prev.seq + sent.entries);
      p.next_seq = sent.prev.seq + sent.entries + 1;
      AdvanceCommit(shard);
      break;
    case rv1::AppendResponse::MISMATCH:
      // A follower whose volume was replaced holds less than before. From
      // the follower's end when its log is shorter; otherwise it holds
      // another epoch's tail, and everything after what it has applied
      // (committed, so the same here) is sent again at once rather than
      // one entry back per call.
      p.match_seq = std::min<uint64_t>(p.match_seq, response.last().seq());
      p.next_seq = response.last().seq() + 1 < next ? response.last().seq() + 1
                                                    : response.applied().seq() + 1;
      if (p.next_seq >= next) p.next_seq = next > 1 ? next - 1 : 1;
      p.next_seq = std::max<uint64_t>(p.next_seq, 1);
      break;
    case rv1::AppendResponse::FENCED:
      StepDown(shard, absl::StrCat("node ", peer, " promised epoch ", response.promised()));
      return true;
    default:
      break;
  }
  if (p.next_seq <= log_->Last(shard->index).seq) *more = true;
  return false;
}

void Replicator::StartDedicated(Shard* shard, uint32_t peer) {
  {
    absl::MutexLock lock(&shard->mu);
    if (!shard->dedicated.insert(peer).second) return;
  }
  absl::MutexLock lock(&shippers_mu_);
  if (stopped_.load()) return;
  shippers_.emplace_back([this, shard, peer] {
    storage::NameThisThread(absl::StrCat("ship-", shard->index, "-to-", peer));
    ShipDedicated(shard, peer);
  });
}

void Replicator::KickShippers() {
  absl::MutexLock lock(&ship_mu_);
  ++ship_generation_;
  ++ship_all_generation_;
}

void Replicator::KickShippers(const std::vector<NewEntries>& appended) {
  absl::MutexLock lock(&ship_mu_);
  ++ship_generation_;
  for (const NewEntries& entries : appended) {
    for (uint32_t peer : entries.peers) ship_due_[peer].insert(entries.shard);
  }
}

void Replicator::ShipDedicated(Shard* shard, uint32_t peer) {
  const uint32_t s = shard->index;
  const absl::Duration tick = Tick(options_.lease_ttl);
  // Hands the pair back to the peer's shared loop, which skipped the
  // shard meanwhile: it is due there at once.
  auto leave = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
    shard->dedicated.erase(peer);
    absl::MutexLock kick(&ship_mu_);
    ++ship_generation_;
    ship_due_[peer].insert(s);
  };
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&shard->mu);
      auto placed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
        return shard->replica.load() &&
               (Holds(shard->voters, peer) || Holds(shard->learners, peer));
      };
      auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
        return stopped_.load() || !placed() || !shard->leading;
      };
      auto work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
        return done() || !Holds(shard->learners, peer) ||
               shard->peers[peer].next_seq <= log_->Last(s).seq;
      };
      if (!first) shard->mu.AwaitWithTimeout(absl::Condition(&work), tick);
      // A voter comes here only to be re-seeded, once; a learner (a move's
      // target) stays until it votes, at the move's pace.
      if (done() || (!first && !Holds(shard->learners, peer))) {
        leave();
        return;
      }
    }
    std::shared_ptr<rv1::Replication::Stub> stub = PeerStub(peer);
    if (stub == nullptr) {
      // Placed before its address reached this node.
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick);
      continue;
    }
    // A move's target gets small pieces, so that its pace is even and its
    // progress shows: a second's worth at most (a quarter of the rate).
    const size_t ship_bytes =
        std::clamp<size_t>(options_.move_bytes_per_second / 4, kMinShipBytes, ship_bytes_);
    Outgoing out;
    const ShipPlan plan = PlanAppend(shard, peer, ship_bytes, /*heartbeat=*/true,
                                     /*from_shared_loop=*/false, &out);
    if (plan == ShipPlan::kRetry) {
      // A read of this node's own log failed (storage trouble, counted and
      // reported by the store): again after a pause, never a re-seed.
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(100));
      continue;
    }
    if (plan == ShipPlan::kReseed) {
      uint64_t epoch;
      {
        absl::MutexLock lock(&shard->mu);
        epoch = shard->lead_epoch;
      }
      absl::Status reseeded = Reseed(shard, peer, epoch);
      if (!reseeded.ok()) {
        LogEvent(spdlog::level::warn, "cannot re-seed a follower",
                 {{"shard", absl::StrCat(s)},
                  {"follower", absl::StrCat(peer)},
                  {"error", reseeded.message()}});
        absl::MutexLock lock(&stop_mu_);
        stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(1));
      }
      continue;
    }
    if (plan != ShipPlan::kSend) continue;
    // A move's copy goes at the move's pace, so that serving keeps its p99.
    if (out.to_learner && out.entries > 0) PaceMove(out.bytes);
    rv1::AppendResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + PeerTimeout(options_.lease_ttl)));
    grpc::Status status = stub->Append(&context, out.request, &response);
    CountShipped(peer, out.entries, out.bytes, out.entry_bytes);
    bool more = false;
    if (TakeAppendResult(out, peer, status, response, &more)) ReleaseLeaderKey(s, out.epoch);
    CompleteCommits({shard});
    if (!status.ok()) {
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                std::min(tick, absl::Milliseconds(100)));
    }
  }
}

void Replicator::ShipLoop(uint32_t peer) {
  const absl::Duration tick = Tick(options_.lease_ttl);
  uint64_t seen = 0;
  uint64_t seen_all = 0;
  absl::Time last_heartbeat = absl::InfinitePast();
  // `more`: look at every shard next round, at once (the first round, a
  // call that failed, a round cut short by its byte budget). `behind`: the
  // shards a follower still lacks entries of after the last call, looked
  // at next round, at once. Under load most calls end with new entries
  // already waiting; looking at those shards alone, not at every shard
  // this node leads, keeps a round's cost independent of the shard count.
  bool more = true;
  std::set<uint32_t> behind;
  bool ship_supported = true;
  absl::Time last_refusal_logged = absl::InfinitePast();
  while (!stopped_.load()) {
    if (!more && behind.empty()) {
      absl::MutexLock lock(&ship_mu_);
      auto woken = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ship_mu_) {
        return stopped_.load() || ship_generation_ != seen;
      };
      ship_mu_.AwaitWithDeadline(absl::Condition(&woken), last_heartbeat + tick);
    }
    const absl::Time now = absl::Now();
    // New entries go at once; the commit alone waits for the next
    // heartbeat (or rides on the next entries), so that a write costs
    // each follower one call, not two.
    const bool heartbeat = now - last_heartbeat >= tick;
    if (heartbeat) last_heartbeat = now;
    // Which shards to look at: those with new entries and those still
    // behind, or all of them on a heartbeat, after a change of leadership
    // or placement, after a round cut short and after a failed call.
    std::set<uint32_t> due;
    due.swap(behind);
    bool scan_all = heartbeat || more;
    {
      absl::MutexLock lock(&ship_mu_);
      seen = ship_generation_;
      if (seen_all != ship_all_generation_) scan_all = true;
      seen_all = ship_all_generation_;
      due.merge(ship_due_[peer]);
      ship_due_[peer].clear();
    }
    if (stopped_.load()) return;
    more = false;
    std::shared_ptr<rv1::Replication::Stub> stub = PeerStub(peer);
    if (stub == nullptr) {
      // Placed before its address reached this node.
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick);
      continue;
    }
    // Every shard this node leads and the peer follows, in one call, up
    // to ship_bytes_ of entries in all; the rest goes in the next call.
    std::vector<Outgoing> outgoing;
    rv1::ShipRequest request;
    size_t budget = ship_bytes_;
    bool retry = false;
    std::vector<Shard*> looked_at;
    if (scan_all) {
      looked_at.reserve(shards_.size());
      for (auto& held : shards_) looked_at.push_back(held.get());
    } else {
      for (uint32_t s : due) looked_at.push_back(shards_[s].get());
    }
    for (Shard* shard : looked_at) {
      if (!shard->replica.load()) continue;
      if (budget < kMinShipBytes) {
        more = true;
        break;
      }
      Outgoing out;
      switch (PlanAppend(shard, peer, budget, heartbeat, /*from_shared_loop=*/true, &out)) {
        case ShipPlan::kSend:
          budget -= std::min(budget, out.bytes);
          outgoing.push_back(std::move(out));
          break;
        case ShipPlan::kReseed:
        case ShipPlan::kDedicate:
          StartDedicated(shard, peer);
          break;
        case ShipPlan::kRetry:
          retry = true;
          break;
        case ShipPlan::kIdle:
        case ShipPlan::kGone:
          break;
      }
    }
    if (outgoing.empty()) {
      if (retry) {
        // A read of this node's own log failed (storage trouble, counted
        // and reported by the store): again after a pause.
        absl::MutexLock lock(&stop_mu_);
        stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(100));
        more = true;
      }
      continue;
    }
    std::vector<grpc::Status> statuses(outgoing.size());
    std::vector<rv1::AppendResponse> responses(outgoing.size());
    const absl::Time deadline = absl::Now() + PeerTimeout(options_.lease_ttl);
    grpc::Status shipped;
    if (ship_supported) {
      for (Outgoing& out : outgoing) request.add_appends()->Swap(&out.request);
      rv1::ShipResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(deadline));
      shipped = stub->Ship(&context, request, &response);
      size_t entries = 0, bytes = 0, entry_bytes = 0;
      for (const Outgoing& out : outgoing) {
        entries += out.entries;
        bytes += out.bytes;
        entry_bytes += out.entry_bytes;
      }
      CountShipped(peer, entries, bytes, entry_bytes);
      if (shipped.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        // A peer from before Ship (a rolling upgrade): one call per shard.
        ship_supported = false;
        for (size_t i = 0; i < outgoing.size(); ++i) {
          outgoing[i].request.Swap(request.mutable_appends(static_cast<int>(i)));
        }
      } else if (shipped.ok() && response.results_size() != request.appends_size()) {
        shipped = grpc::Status(grpc::StatusCode::INTERNAL, "a Ship answer of the wrong length");
      }
      for (size_t i = 0; ship_supported && i < outgoing.size(); ++i) {
        statuses[i] = shipped;
        if (shipped.ok()) responses[i].Swap(response.mutable_results(static_cast<int>(i)));
      }
    }
    if (!ship_supported) {
      for (size_t i = 0; i < outgoing.size(); ++i) {
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(deadline));
        statuses[i] = stub->Append(&context, outgoing[i].request, &responses[i]);
        if (!statuses[i].ok()) shipped = statuses[i];
      }
    }
    std::vector<Shard*> answered;
    answered.reserve(outgoing.size());
    for (size_t i = 0; i < outgoing.size(); ++i) {
      bool lacks = false;
      if (TakeAppendResult(outgoing[i], peer, statuses[i], responses[i], &lacks)) {
        ReleaseLeaderKey(outgoing[i].shard->index, outgoing[i].epoch);
      }
      if (lacks) behind.insert(outgoing[i].shard->index);
      answered.push_back(outgoing[i].shard);
    }
    // The writes whose commit this round raised are applied and answered
    // here, on this thread.
    CompleteCommits(answered);
    // A shard whose log could not be read goes again with the next round,
    // which looks at every shard (and pauses if nothing else is due).
    if (retry) more = true;
    if (!shipped.ok()) {
      const grpc::StatusCode code = shipped.error_code();
      if (code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED &&
          absl::Now() - last_refusal_logged > absl::Seconds(10)) {
        // Not an outage, which the peer's own health shows: a refusal the
        // operator has to see, such as a message over the peer's limit.
        last_refusal_logged = absl::Now();
        LogEvent(spdlog::level::warn, "a follower refuses this node's replication calls",
                 {{"follower", absl::StrCat(peer)}, {"error", shipped.error_message()}});
      }
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                std::min(tick, absl::Milliseconds(100)));
      more = true;
    }
  }
}

void Replicator::AdvanceCommit(Shard* shard) {
  // Only voters count (MajorityHolds): a learner (a move's target) may hold
  // less than a majority of voters does, and an entry acknowledged by it
  // alone would not survive the loss of this leader.
  const uint64_t last = log_->Last(shard->index).seq;
  const uint64_t majority_holds = core::MajorityHolds(
      shard->voters, [&](uint32_t node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) -> uint64_t {
        if (node == options_.self) return last;
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
  // One append, and one sync, for every shard of the call.
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
  if (!appends.empty()) appended = log_->AppendAll(appends);
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
        }
        if (released.empty() || released.back() != std::make_pair(shard->index, pending.epoch)) {
          released.emplace_back(shard->index, pending.epoch);
        }
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

absl::Status Replicator::Reseed(Shard* shard, uint32_t peer, uint64_t epoch) {
  const uint32_t s = shard->index;
  std::shared_ptr<rv1::Replication::Stub> stub = PeerStub(peer);
  if (stub == nullptr) return absl::UnavailableError(absl::StrCat("node ", peer, " is not known"));
  // Every entry through `position` is in the records copied; the log from
  // there on is replayed over the copy.
  const LogPosition position = log_->Applied(s);
  LogEvent(spdlog::level::info, "re-seeding a follower from a copy of the shard",
           {{"shard", absl::StrCat(s)},
            {"follower", absl::StrCat(peer)},
            {"position", absl::StrCat(position.epoch, "/", position.seq)}});
  bool to_learner;
  {
    absl::MutexLock lock(&shard->mu);
    to_learner = Holds(shard->learners, peer);
  }
  const size_t page_bytes = to_learner ? std::clamp<size_t>(options_.move_bytes_per_second / 4,
                                                            kMinShipBytes, ship_bytes_)
                                       : ship_bytes_;
  std::string after;
  uint64_t pages = 0, records = 0;
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&shard->mu);
      if (stopped_.load() || !shard->leading || shard->lead_epoch != epoch) {
        return absl::UnavailableError("no longer leading");
      }
    }
    absl::StatusOr<storage::ReplicationLog::RecordPage> page =
        log_->ReadRecords(s, after, page_bytes);
    if (!page.ok()) return page.status();
    rv1::RestoreRequest request;
    request.set_shard(s);
    request.set_epoch(epoch);
    request.set_leader(options_.self);
    request.set_begin(first);
    request.set_done(page->done);
    ToProto(position, request.mutable_position());
    for (auto& [key, value] : page->records) {
      rv1::StoredRecord* out = request.add_records();
      out->set_key(std::move(key));
      out->set_value(std::move(value));
    }
    records += request.records_size();
    const uint64_t request_bytes = request.ByteSizeLong();
    if (to_learner) PaceMove(request_bytes);
    rv1::RestoreResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Status status = stub->Restore(&context, request, &response);
    if (!status.ok()) return absl::UnavailableError(status.error_message());
    HeardFrom(peer);
    if (!response.accepted()) return absl::FailedPreconditionError(response.reason());
    {
      absl::MutexLock lock(&shard->mu);
      if (auto it = shard->peers.find(peer); it != shard->peers.end()) {
        it->second.sent_bytes += request_bytes;
      }
    }
    ++pages;
    if (page->done) break;
    after = page->last_key;
  }
  LogEvent(spdlog::level::info, "re-seeded a follower",
           {{"shard", absl::StrCat(s)},
            {"follower", absl::StrCat(peer)},
            {"records", absl::StrCat(records)},
            {"pages", absl::StrCat(pages)}});
  absl::MutexLock lock(&shard->mu);
  if (!shard->leading || shard->lead_epoch != epoch || !shard->peers.count(peer)) {
    return absl::OkStatus();
  }
  Peer& p = shard->peers[peer];
  p.match_seq = position.seq;
  p.next_seq = position.seq + 1;
  AdvanceCommit(shard);
  if (!shard->pending.empty()) SweepCommitsSoon();
  return absl::OkStatus();
}

void Replicator::PaceMove(uint64_t bytes) {
  const uint64_t rate = options_.move_bytes_per_second;
  if (rate == 0) return;
  absl::Time due;
  {
    absl::MutexLock lock(&pace_mu_);
    moves_paced_until_ = std::max(moves_paced_until_, absl::Now()) +
                         absl::Seconds(static_cast<double>(bytes) / static_cast<double>(rate));
    due = moves_paced_until_;
  }
  absl::MutexLock lock(&stop_mu_);
  stop_mu_.AwaitWithDeadline(absl::Condition(&stopping_), due);
}

}  // namespace dedup::server::cluster
