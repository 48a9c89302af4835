// The Replicator as a leader (docs/replication.md §2, §4): shipping the
// log to followers, trimming and re-seeding. Committing writes is in
// replicator_commit.cc.

#include "server/cluster/peer_shipper.h"
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
  // Rounds go on one ShipStream; to a peer without Ship at all, one
  // Append call per shard.
  PeerShipper shipper;
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
    // Hand-off notices for this peer ride on this round, or make one.
    std::vector<rv1::HandOffNotice> notices;
    {
      absl::MutexLock lock(&ship_mu_);
      auto it = handoff_notices_.find(peer);
      if (it != handoff_notices_.end()) {
        if (ship_supported) {
          notices.swap(it->second);
          handoff_notices_sending_ += notices.size();
        } else {
          it->second.clear();  // A peer without Ship reads etcd instead.
        }
      }
    }
    if (outgoing.empty() && notices.empty()) {
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
      for (rv1::HandOffNotice& notice : notices) request.add_handoffs()->Swap(&notice);
      rv1::ShipResponse response;
      shipped = shipper.Ship(stub, request, &response, deadline);
      if (!notices.empty()) {
        absl::MutexLock lock(&ship_mu_);
        handoff_notices_sending_ -= notices.size();
      }
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
  // One walk for the whole copy: its pages are the records as they were
  // when it began, at `position` or after it.
  std::unique_ptr<storage::ReplicationLog::RecordWalk> walk = log_->WalkRecords(s, "");
  uint64_t pages = 0, records = 0;
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&shard->mu);
      if (stopped_.load() || !shard->leading || shard->lead_epoch != epoch) {
        return absl::UnavailableError("no longer leading");
      }
    }
    absl::StatusOr<storage::ReplicationLog::RecordPage> page = walk->Next(page_bytes);
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
