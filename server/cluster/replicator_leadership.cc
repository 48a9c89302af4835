// The Replicator's leadership (docs/replication.md §3): reading who leads
// from etcd, elections and stepping down (hand-offs: replicator_handoff.cc).

#include "server/cluster/replicator.h"
#include "server/cluster/replicator_internal.h"

namespace dedup::server::cluster {

void Replicator::StepDownWithoutLease() {
  const bool valid = LeaseValid();
  const int64_t lease = lease_id_.load();
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    if (!shard->leading || shard->electing) continue;
    // Its heartbeats would keep telling the followers that the shard has a
    // leader, and no follower would ever stand for election.
    if (!valid) {
      StepDown(shard.get(), "this node could not renew its etcd lease in time");
    } else if (shard->lead_lease != lease) {
      // Won under a lease that ended while the election finished: the
      // leader key went with it, and another replica may stand.
      StepDown(shard.get(), "its leader key was on an etcd lease that has ended");
    }
  }
}

bool Replicator::ReadLeaseValid(const Shard& shard) const {
  // On every call's path: no allocation, a few voters at most.
  const int64_t since =
      SteadyNowNs() - absl::ToInt64Nanoseconds(core::ReadLease(options_.lease_ttl));
  uint32_t answered = 0;
  for (uint32_t voter : shard.voters) {
    if (voter == options_.self) {
      ++answered;
      continue;
    }
    auto it = shard.peers.find(voter);
    if (it != shard.peers.end() && it->second.acked_sent_ns > since) ++answered;
  }
  return answered >= core::Majority(shard.voters.size());
}

bool Replicator::Sticky(const Shard& shard, uint32_t candidate, uint64_t handoff_epoch) const {
  return core::Sticky(
      {shard.heard_leader, shard.heard_epoch, absl::Nanoseconds(SteadyNowNs() - shard.heard_ns)},
      candidate, handoff_epoch, options_.lease_ttl);
}

void Replicator::StepDownWithoutMajority() {
  const absl::Time now = absl::Now();
  const absl::Duration window = core::QuorumWindow(options_.lease_ttl);
  // Whether a peer answers at all, not per shard: a shard whose appends
  // wait behind others' in the shipping budget, or a voter busy taking a
  // re-seed's pages, must not make a reachable leader give up.
  std::set<uint32_t> answering;
  {
    absl::MutexLock lock(&heard_mu_);
    for (const auto& [peer, at] : heard_) {
      if (now - at <= window) answering.insert(peer);
    }
  }
  auto heard = [&](uint32_t node) { return answering.count(node) > 0; };
  std::vector<std::pair<uint32_t, uint64_t>> released;
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    if (!shard->leading || !shard->serving || now - shard->leading_since < window) continue;
    if (core::MajorityAnswered(shard->voters, options_.self, heard)) continue;
    released.push_back({shard->index, shard->lead_epoch});
    StepDown(shard.get(), "no majority of its voters has answered for a while");
    // It could not commit; the voters it cannot reach elect meanwhile.
    shard->next_election = std::max(shard->next_election, now + options_.lease_ttl);
  }
  for (const auto& [s, epoch] : released) ReleaseLeaderKey(s, epoch);
}

void Replicator::ReadLeadership() {
  const absl::Time read_at = absl::Now();
  absl::StatusOr<std::vector<EtcdKeyValue>> kvs = etcd_->GetPrefix(options_.etcd_prefix);
  if (!kvs.ok()) {
    named_in_move_ = false;  // No quicker passes while etcd does not answer.
    return;
  }
  const size_t n = shards_.size();
  struct Seen {
    int32_t leader = -1;
    uint64_t epoch = 0;
    int64_t lease = 0;
    int64_t mod_revision = 0;
    uint64_t map_epoch = 0;
    int32_t handoff = -1;
    uint64_t handoff_epoch = 0;
    bool placed = false;
    std::vector<uint32_t> voters, learners;
    int64_t placement_revision = 0;
    Move move;
    std::vector<uint32_t> reseeding;
  };
  std::vector<Seen> seen(n);
  std::map<uint32_t, std::string> members, zones;
  std::set<uint32_t> live, draining;
  int64_t newest_placement = 0;
  for (const EtcdKeyValue& kv : *kvs) {
    absl::string_view rest = kv.key;
    if (!absl::ConsumePrefix(&rest, options_.etcd_prefix)) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(rest, '/');
    uint32_t s;
    if (parts.size() == 3 && parts[0] == "learner") {
      // learner/<node>/<s>: node's copy of s is being re-seeded.
      uint32_t node;
      if (absl::SimpleAtoi(parts[1], &node) && absl::SimpleAtoi(parts[2], &s) && s < n) {
        seen[s].reseeding.push_back(node);
      }
      continue;
    }
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &s)) continue;
    if (parts[0] == "members") {
      members[s] = kv.value;
      continue;
    }
    if (parts[0] == "nodes") {
      live.insert(s);
      continue;
    }
    if (parts[0] == "zones") {
      zones[s] = kv.value;
      continue;
    }
    if (parts[0] == "draining") {
      draining.insert(s);
      continue;
    }
    if (s >= n) continue;
    if (parts[0] == "leader") {
      std::vector<absl::string_view> value = absl::StrSplit(kv.value, ' ');
      int32_t node;
      uint64_t epoch;
      if (value.size() == 2 && absl::SimpleAtoi(value[0], &node) &&
          absl::SimpleAtoi(value[1], &epoch)) {
        seen[s].leader = node;
        seen[s].epoch = epoch;
        seen[s].lease = kv.lease;
        seen[s].mod_revision = kv.mod_revision;
      }
    } else if (parts[0] == "shards") {
      if (!absl::SimpleAtoi(kv.value, &seen[s].map_epoch)) {
        LogEvent(spdlog::level::err, "an etcd shard-map entry is not an epoch",
                 {{"key", kv.key}, {"value", kv.value}});
      }
    } else if (parts[0] == "handoff") {
      // "<target> <epoch of the leader that handed off>".
      std::vector<absl::string_view> value = absl::StrSplit(kv.value, ' ');
      if (!absl::SimpleAtoi(value[0], &seen[s].handoff)) seen[s].handoff = -1;
      if (value.size() < 2 || !absl::SimpleAtoi(value[1], &seen[s].handoff_epoch)) {
        seen[s].handoff_epoch = 0;
      }
    } else if (parts[0] == "placement") {
      if (ParsePlacement(kv.value, &seen[s].voters, &seen[s].learners)) {
        seen[s].placed = true;
        seen[s].placement_revision = kv.mod_revision;
        newest_placement = std::max(newest_placement, kv.mod_revision);
      } else {
        LogEvent(spdlog::level::err, "an etcd placement entry cannot be read; keeping the last",
                 {{"key", kv.key}, {"value", kv.value}});
      }
    } else if (parts[0] == "moves") {
      Move& move = seen[s].move;
      if (ParseMove(kv.value, &move.from, &move.to, &move.state)) {
        move.revision = kv.mod_revision;
      } else {
        move = Move();
        LogEvent(spdlog::level::err, "an etcd move entry cannot be read",
                 {{"key", kv.key}, {"value", kv.value}});
      }
    }
  }
  {
    absl::MutexLock lock(&nodes_mu_);
    for (const auto& [node, address] : members) {
      if (node >= addresses_.size()) addresses_.resize(node + 1);
      // The address a node registered with is the one its peers use; the
      // flags of this node may predate it.
      if (addresses_[node] != address && !address.empty()) {
        addresses_[node] = address;
        stubs_.erase(node);
      }
    }
    for (const auto& [node, zone] : zones) {
      if (node >= zones_.size()) zones_.resize(node + 1);
      zones_[node] = zone;
    }
    live_ = std::move(live);
    draining_ = std::move(draining);
    placement_revision_ = std::max(placement_revision_, newest_placement);
  }
  const int32_t self = static_cast<int32_t>(options_.self);
  named_in_move_ = std::any_of(seen.begin(), seen.end(), [self](const Seen& view) {
    return view.move.revision != 0 && (view.move.from == self || view.move.to == self);
  });
  std::vector<uint32_t> stale;  // Leader keys of an earlier run of this node.
  for (size_t s = 0; s < n; ++s) {
    Shard& shard = *shards_[s];
    Seen& view = seen[s];
    absl::MutexLock lock(&shard.mu);
    // A hand-off notice that came after the read began: the read may
    // predate the hand-off, and would name the old leader again.
    const bool told_since = shard.told_handoff_at >= read_at;
    if (!told_since) {
      shard.handoff_to = view.handoff;
      shard.handoff_epoch = view.handoff_epoch;
    }
    shard.epoch = std::max({shard.epoch, view.epoch, view.map_epoch});
    // An election this node won after the read began: the read may
    // predate its leader key.
    const bool won_since = shard.electing || (shard.leading && shard.won_at >= read_at);
    if (shard.leading && !won_since && (view.leader != self || view.epoch != shard.lead_epoch)) {
      // Before the placement is taken: a deposed leader must not count
      // acknowledgements under voters that another leader placed.
      StepDown(&shard,
               view.leader < 0
                   ? std::string("its leader key in etcd is gone (the lease ended)")
                   : absl::StrCat("etcd names node ", view.leader, " at epoch ", view.epoch));
    }
    if (view.placed && view.placement_revision > shard.placement_revision) {
      ApplyPlacement(&shard, std::move(view.voters), std::move(view.learners),
                     view.placement_revision);
    }
    shard.reseeding = std::move(view.reseeding);
    if (view.move.revision != shard.move.revision) {
      const absl::Time gone =
          shard.move.to == view.move.to ? shard.move.target_gone_since : absl::InfiniteFuture();
      shard.move = view.move;
      shard.move.target_gone_since = gone;
    }
    if (won_since || told_since) continue;
    if (view.leader < 0) {
      if (shard.leader >= 0) shard.leaderless_since = absl::Now();
      shard.leader = -1;
      continue;
    }
    if (view.leader == self && !shard.leading && !shard.electing && !shard.handing_over) {
      stale.push_back(static_cast<uint32_t>(s));
    }
    if (shard.leader != view.leader) shard.leaderless_since = absl::InfiniteFuture();
    shard.leader = view.leader;
  }
  for (uint32_t s : stale) {
    // A key naming this node while it does not lead: an earlier run's
    // (that run is gone), or one it stepped down from. Either way the
    // shard can be taken over now rather than when the lease ends.
    etcd_
        ->Txn({{Key(absl::StrCat("leader/", s)), seen[s].mod_revision, std::nullopt}},
              {{Key(absl::StrCat("leader/", s)), "", 0, true}})
        .IgnoreError();
  }
}

void Replicator::ElectionLoop() {
  const absl::Duration tick = Tick(options_.lease_ttl);
  while (true) {
    {
      absl::MutexLock lock(&stop_mu_);
      if (stop_mu_.AwaitWithTimeout(
              absl::Condition(&stopping_),
              named_in_move_.load() ? MovingTick(options_.lease_ttl) : tick)) {
        return;
      }
    }
    if (!LeaseValid() || handing_off_.load()) continue;
    std::vector<Shard*> due;
    for (auto& shard : shards_) {
      if (!shard->replica) continue;
      absl::MutexLock lock(&shard->mu);
      if (!DueForElection(*shard, absl::Now())) continue;
      shard->election_queued = true;
      due.push_back(shard.get());
    }
    QueueElections(due);
  }
}

bool Replicator::DueForElection(const Shard& shard, absl::Time now) const {
  if (shard.election_queued || shard.leader >= 0 || shard.leading || shard.learner ||
      shard.placed_learner || !Holds(shard.voters, options_.self)) {
    return false;
  }
  // The shard's first voter tries first, then the next, and so on, so
  // leadership spreads over the nodes; a handed-off shard goes to its
  // target at once.
  const auto rank =
      std::find(shard.voters.begin(), shard.voters.end(), options_.self) - shard.voters.begin();
  const absl::Duration wait =
      core::StandWait(rank, shard.handoff_to, options_.self, options_.lease_ttl);
  const absl::Time since =
      shard.leaderless_since == absl::InfiniteFuture() ? now : shard.leaderless_since;
  return now >= since + wait && now >= shard.next_election;
}

void Replicator::QueueElections(const std::vector<Shard*>& due) {
  if (due.empty()) return;
  absl::MutexLock lock(&elect_mu_);
  // Stop sets stopped_ before it takes the workers to join: none may
  // start after that (a notice is handled on a gRPC thread).
  if (stopped_.load()) return;
  elect_queue_.insert(elect_queue_.end(), due.begin(), due.end());
  while (elect_queue_.size() > elect_idle_ && electors_.size() < kElectionWorkers) {
    electors_.emplace_back([this] {
      storage::NameThisThread("elections");
      ElectionWorker();
    });
    ++elect_idle_;  // Counted as idle from its start, so that no more start for this work.
  }
}

void Replicator::ElectionWorker() {
  std::mt19937_64 random(std::random_device{}());
  bool counted_idle = true;  // The starter counted this worker as idle.
  while (true) {
    Shard* shard;
    {
      absl::MutexLock lock(&elect_mu_);
      if (!counted_idle) ++elect_idle_;
      counted_idle = false;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(elect_mu_) {
        return !elect_queue_.empty() || stopped_.load();
      };
      elect_mu_.Await(absl::Condition(&ready));
      --elect_idle_;
      if (stopped_.load()) return;
      shard = elect_queue_.front();
      elect_queue_.pop_front();
    }
    if (LeaseValid() && !handing_off_.load()) Elect(shard);
    absl::MutexLock lock(&shard->mu);
    shard->election_queued = false;
    if (!shard->leading) {
      // Candidates that lost start again at different moments.
      shard->next_election =
          std::max(shard->next_election,
                   absl::Now() + Tick(options_.lease_ttl) +
                       absl::Milliseconds(random() %
                                          (1 + absl::ToInt64Milliseconds(options_.lease_ttl / 4))));
    }
  }
}

void Replicator::Elect(Shard* shard) {
  if (handing_off_.load()) return;
  uint64_t handoff_epoch;
  {
    // Queued a while ago: since then this replica may have promised
    // another candidate (which pushes next_election out) or learned of a
    // leader. Standing now would fence that candidate.
    absl::MutexLock lock(&shard->mu);
    if (absl::Now() < shard->next_election || shard->leader >= 0 || shard->leading) return;
    handoff_epoch =
        shard->handoff_to == static_cast<int32_t>(options_.self) ? shard->handoff_epoch : 0;
    // Its own promise counts too: not while a leader may answer reads on
    // this replica's acknowledgement.
    if (Sticky(*shard, options_.self, handoff_epoch)) return;
  }
  const uint32_t s = shard->index;
  const std::string shard_key = Key(absl::StrCat("shards/", s));
  const std::string leader_key = Key(absl::StrCat("leader/", s));
  // Only a shard etcd says has no leader is contested: asking for promises
  // on a stale view would fence a leader that is alive.
  absl::StatusOr<std::optional<EtcdKeyValue>> current = etcd_->Get(leader_key);
  if (!current.ok() || current->has_value()) return;
  absl::StatusOr<std::optional<EtcdKeyValue>> map = etcd_->Get(shard_key);
  if (!map.ok()) return;
  uint64_t map_epoch = 0;
  int64_t map_revision = 0;
  if (map->has_value()) {
    // A map entry that is not a number is not guessed at: an epoch chosen
    // below the real one would be refused by every replica anyway.
    if (!absl::SimpleAtoi((*map)->value, &map_epoch)) {
      LogEvent(spdlog::level::err, "an etcd shard-map entry is not an epoch; no election",
               {{"shard", absl::StrCat(s)}, {"key", shard_key}, {"value", (*map)->value}});
      return;
    }
    map_revision = (*map)->mod_revision;
  }
  // The voters as etcd holds them now; the transaction below wins only
  // if they are still the voters then.
  const std::string placement_key = Key(absl::StrCat("placement/", s));
  absl::StatusOr<std::optional<EtcdKeyValue>> placement = etcd_->Get(placement_key);
  if (!placement.ok() || !placement->has_value()) return;
  std::vector<uint32_t> voters, learners;
  if (!ParsePlacement((*placement)->value, &voters, &learners) || !Holds(voters, options_.self)) {
    return;
  }
  const int64_t placement_revision = (*placement)->mod_revision;
  uint64_t known_epoch;
  {
    absl::MutexLock lock(&shard->mu);
    known_epoch = shard->epoch;
  }
  const uint64_t epoch = std::max({map_epoch, log_->Promised(s), known_epoch}) + 1;

  // Promises from a majority, this node's first.
  absl::StatusOr<LogPosition> mine = log_->Promise(s, epoch);
  if (!mine.ok()) {
    ++elections_lost_;
    return;
  }
  // Asked of every other replica at once, and decided as soon as the
  // outcome cannot change (core::Ballot): a replica that does not
  // answer (down, or hung) costs the election nothing while the others
  // decide it.
  struct SharedBallot {
    explicit SharedBallot(core::Ballot b) : ballot(std::move(b)) {}
    absl::Mutex mu;
    core::Ballot ballot ABSL_GUARDED_BY(mu);
  };
  struct Ask {
    grpc::ClientContext context;
    rv1::PromiseRequest request;
    rv1::PromiseResponse response;
  };
  auto shared =
      std::make_shared<SharedBallot>(core::Ballot(voters, options_.self, {mine->epoch, mine->seq}));
  for (uint32_t node : voters) {
    if (node == options_.self) continue;
    std::shared_ptr<rv1::Replication::Stub> stub = PeerStub(node);
    if (stub == nullptr) {  // Its address is not known yet.
      absl::MutexLock lock(&shared->mu);
      shared->ballot.Unanswered(node);
      continue;
    }
    auto ask = std::make_shared<Ask>();
    ask->request.set_shard(s);
    ask->request.set_epoch(epoch);
    ask->request.set_candidate(options_.self);
    ask->request.set_handoff_epoch(handoff_epoch);
    ask->context.set_deadline(absl::ToChronoTime(absl::Now() + PeerTimeout(options_.lease_ttl)));
    stub->async()->Promise(&ask->context, &ask->request, &ask->response,
                           [shared, ask, node, stub](grpc::Status status) {
                             absl::MutexLock lock(&shared->mu);
                             if (!status.ok()) {
                               shared->ballot.Unanswered(node);
                             } else if (ask->response.promised()) {
                               const rv1::Position& last = ask->response.last();
                               shared->ballot.Granted(node, {last.epoch(), last.seq()});
                             } else {
                               shared->ballot.Refused(node, ask->response.promised_epoch());
                             }
                           });
  }
  core::Ballot::Outcome outcome;
  core::Position best;
  uint32_t best_node;
  uint64_t refused_epoch;
  {
    absl::MutexLock lock(&shared->mu);
    auto decided = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) {
      return shared->ballot.outcome() != core::Ballot::Outcome::kPending;
    };
    // The calls' own deadline ends every wait; the margin covers their
    // callbacks.
    shared->mu.AwaitWithTimeout(absl::Condition(&decided),
                                PeerTimeout(options_.lease_ttl) + absl::Milliseconds(100));
    outcome = shared->ballot.outcome();
    best = shared->ballot.best();
    best_node = shared->ballot.best_node();
    refused_epoch = shared->ballot.refused_epoch();
  }
  if (refused_epoch > 0) {
    // The next attempt goes above what the replicas have promised.
    absl::MutexLock lock(&shard->mu);
    shard->epoch = std::max(shard->epoch, refused_epoch);
  }
  if (outcome != core::Ballot::Outcome::kWon) {
    ++elections_lost_;
    return;
  }
  // The most advanced log of a majority holds every committed entry.
  if (best_node != options_.self) {
    absl::Status caught_up = CatchUpFrom(shard, best_node, {best.epoch, best.seq}, epoch);
    if (!caught_up.ok()) {
      ++elections_lost_;
      LogEvent(spdlog::level::warn, "cannot copy the log a new leader needs",
               {{"shard", absl::StrCat(s)}, {"error", caught_up.message()}});
      return;
    }
  }
  if (handing_off_.load()) return;
  // The leader key lives on this node's lease: without a lease (etcd
  // ended it while the promises were gathered) it would never expire.
  const int64_t lease = lease_id_.load();
  if (lease == 0 || !LeaseValid()) {
    ++elections_lost_;
    return;
  }
  {
    absl::MutexLock lock(&shard->mu);
    shard->electing = true;
  }
  absl::StatusOr<bool> won =
      etcd_->Txn({{shard_key, map_revision, std::nullopt},
                  {leader_key, 0, std::nullopt},
                  {placement_key, placement_revision, std::nullopt}},
                 {{shard_key, absl::StrCat(epoch), 0, false},
                  {leader_key, absl::StrCat(options_.self, " ", epoch), lease, false},
                  {Key(absl::StrCat("handoff/", s)), "", 0, true}});
  if (!won.ok() || !*won) {
    absl::MutexLock lock(&shard->mu);
    shard->electing = false;
    ++elections_lost_;
    return;
  }

  const LogPosition last = log_->Last(s);
  bool abandoned = false;
  {
    absl::MutexLock lock(&shard->mu);
    shard->electing = false;
    // HandOff (or Stop) passed this shard while it was not yet led here:
    // HandOff sets handing_off_ before it locks each shard.
    abandoned = handing_off_.load() || stopped_.load();
    if (!abandoned) {
      shard->won_at = absl::Now();
      shard->lead_lease = lease;
      shard->leading = true;
      shard->serving = false;
      shard->lead_epoch = epoch;
      shard->epoch = epoch;
      shard->leader = static_cast<int32_t>(options_.self);
      shard->leaderless_since = absl::InfiniteFuture();
      shard->tokens = epoch << kTokenEpochShift;
      shard->epoch_start_seq = last.seq + 1;
      shard->commit_seq = log_->Applied(s).seq;
      if (placement_revision > shard->placement_revision) {
        ApplyPlacement(shard, voters, learners, placement_revision);
      }
      shard->peers.clear();
      for (const std::vector<uint32_t>* nodes : {&shard->voters, &shard->learners}) {
        for (uint32_t node : *nodes) {
          if (node != options_.self) shard->peers[node].next_seq = last.seq + 1;
        }
      }
    }
  }
  if (abandoned) {
    ReleaseLeaderKey(s, epoch);
    return;
  }
  // The first entry of the epoch; once a majority holds it, every entry
  // before it in this log is committed too.
  absl::StatusOr<LogPosition> start = log_->Append(s, epoch, EmptyBatch());
  if (start.ok()) KickShippers();
  bool committed = false;
  if (start.ok()) {
    absl::MutexLock lock(&shard->mu);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
      return stopped_.load() || !shard->leading || shard->lead_epoch != epoch ||
             shard->commit_seq >= start->seq;
    };
    shard->mu.AwaitWithTimeout(absl::Condition(&done), options_.lease_ttl);
    committed = shard->leading && shard->lead_epoch == epoch && shard->commit_seq >= start->seq;
  }
  absl::Status applied = committed ? log_->ApplyThrough(s, start->seq) : absl::OkStatus();
  {
    absl::MutexLock lock(&shard->mu);
    if (committed && applied.ok() && shard->leading && shard->lead_epoch == epoch) {
      shard->serving = true;
      shard->leading_since = absl::Now();
      ++leader_changes_;
      LogEvent(spdlog::level::info, "leading shard",
               {{"shard", absl::StrCat(s)}, {"epoch", absl::StrCat(epoch)}});
      return;
    }
    if (!shard->leading || shard->lead_epoch != epoch) {
      // Whatever stepped it down gives up the key: a hand-off replaces it
      // with the handoff key, and a release here first would leave the
      // target unnamed.
      return;
    }
    StepDown(shard,
             applied.ok() ? "no majority acknowledged the start of its epoch" : applied.message());
  }
  ReleaseLeaderKey(s, epoch);
}

absl::Status Replicator::CatchUpFrom(Shard* shard, uint32_t node, LogPosition target,
                                     uint64_t epoch) {
  const uint32_t s = shard->index;
  std::shared_ptr<rv1::Replication::Stub> stub = PeerStub(node);
  if (stub == nullptr) return absl::UnavailableError(absl::StrCat("node ", node, " is not known"));
  // Entries already applied here are committed, so the source holds them
  // alike; past them this log may hold an older epoch's tail. The copy
  // starts at this log's end when the source's entry there is the same
  // (the common case: a few entries behind), else after what is applied.
  LogPosition prev = log_->Applied(s);
  const LogPosition last = log_->Last(s);
  if (prev < last && last < target) {
    rv1::ReadLogRequest request;
    request.set_shard(s);
    request.set_from_seq(last.seq);
    request.set_max_bytes(1);  // One entry always comes.
    rv1::ReadLogResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + PeerTimeout(options_.lease_ttl)));
    if (stub->ReadLog(&context, request, &response).ok() && response.entries_size() > 0 &&
        response.entries(0).seq() == last.seq && response.entries(0).epoch() == last.epoch) {
      prev = last;
    }
  }
  while (prev < target && prev.seq < target.seq + 1) {
    if (stopped_.load()) return absl::UnavailableError("stopping");
    rv1::ReadLogRequest request;
    request.set_shard(s);
    request.set_from_seq(prev.seq + 1);
    request.set_max_bytes(ship_bytes_);
    rv1::ReadLogResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + PeerTimeout(options_.lease_ttl) * 4));
    grpc::Status status = stub->ReadLog(&context, request, &response);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("reading node ", node, "'s log: ", status.error_message()));
    }
    if (response.entries_size() == 0) break;
    std::vector<LogEntry> entries;
    for (const rv1::Entry& e : response.entries())
      entries.push_back({e.epoch(), e.seq(), e.batch()});
    absl::Status appended = log_->AppendAfter(s, epoch, prev, entries);
    if (!appended.ok()) return appended;
    prev = entries.back().position();
    if (prev.seq >= target.seq) break;
  }
  if (log_->Last(s) < target) {
    return absl::UnavailableError(
        absl::StrCat("node ", node, "'s log ended before ", target.epoch, "/", target.seq));
  }
  return absl::OkStatus();
}

void Replicator::StepDown(Shard* shard, absl::string_view why) {
  if (!shard->leading) return;
  shard->leading = false;
  shard->serving = false;
  shard->leader = -1;
  shard->leaderless_since = absl::Now();
  // Its writes waiting for a commit are answered UNAVAILABLE.
  if (!shard->pending.empty()) SweepCommitsSoon();
  LogEvent(spdlog::level::warn, "no longer leading shard",
           {{"shard", absl::StrCat(shard->index)},
            {"epoch", absl::StrCat(shard->lead_epoch)},
            {"reason", std::string(why)}});
}

void Replicator::ReleaseLeaderKey(uint32_t shard, uint64_t epoch) {
  const std::string key = Key(absl::StrCat("leader/", shard));
  etcd_->Txn({{key, 0, absl::StrCat(options_.self, " ", epoch)}}, {{key, "", 0, true}})
      .IgnoreError();
}

}  // namespace dedup::server::cluster
