// The Replicator's placement (docs/elastic.md): which shards this node
// holds, and the steps of shard moves.

#include "server/cluster/replicator.h"
#include "server/cluster/replicator_internal.h"

namespace dedup::server::cluster {

void Replicator::ClearCaughtUpLearners() {
  for (auto& shard : shards_) {
    if (!shard->replica) continue;
    int64_t revision;
    {
      absl::MutexLock lock(&shard->mu);
      if (!shard->learner || !shard->learner_caught_up || shard->restoring) continue;
      revision = shard->learner_revision;
    }
    // Only the key this learner was made with: a re-seed begun meanwhile
    // wrote it again, and keeps it.
    const std::string key = Key(absl::StrCat("learner/", options_.self, "/", shard->index));
    absl::StatusOr<bool> deleted =
        etcd_->Txn({{key, revision, std::nullopt}}, {{key, "", 0, true}});
    if (!deleted.ok()) continue;
    if (!*deleted) {
      absl::StatusOr<std::optional<EtcdKeyValue>> current = etcd_->Get(key);
      if (!current.ok() || current->has_value()) continue;  // A newer re-seed's key.
    }
    absl::MutexLock lock(&shard->mu);
    if (shard->learner_revision != revision || !shard->learner_caught_up || shard->restoring) {
      continue;
    }
    shard->learner = false;
    shard->learner_caught_up = false;
    shard->learner_revision = 0;
    LogEvent(spdlog::level::info, "re-seeded shard; voting again",
             {{"shard", absl::StrCat(shard->index)}});
  }
}

void Replicator::ApplyPlacement(Shard* shard, std::vector<uint32_t> voters,
                                std::vector<uint32_t> learners, int64_t revision) {
  const uint32_t self = options_.self;
  const bool first = shard->placement_revision == 0;
  const bool held = shard->replica.load();
  const bool holds = Holds(voters, self) || Holds(learners, self);
  shard->voters = std::move(voters);
  shard->learners = std::move(learners);
  shard->placement_revision = revision;
  shard->placed_learner = Holds(shard->learners, self);
  const uint32_t s = shard->index;
  const bool has_data = log_->Last(s).seq > 0 || log_->Applied(s).seq > 0;
  if (holds && !held && !first && has_data) {
    // Added back after it was removed: whatever is left of the old copy is
    // dropped, and the leader copies the shard anew.
    absl::Status dropped = log_->BeginRestore(s);
    if (!dropped.ok()) {
      LogEvent(spdlog::level::err, "cannot clear an old copy of a shard added back to this node",
               {{"shard", absl::StrCat(s)}, {"error", dropped.message()}});
    }
  }
  shard->replica = holds;
  if (!holds) {
    if (shard->leading) StepDown(shard, "this node no longer holds the shard");
    shard->learner = false;
    shard->restoring = false;
    if (has_data) {
      // Moved away: every replica that now holds the shard has what it
      // committed, so this copy goes (records and log; the promise stays).
      absl::Status dropped = log_->BeginRestore(s);
      LogEvent(dropped.ok() ? spdlog::level::info : spdlog::level::err,
               dropped.ok() ? "dropped a shard this node no longer holds"
                            : "cannot drop a shard this node no longer holds",
               {{"shard", absl::StrCat(s)}, {"error", std::string(dropped.message())}});
    }
  }
  if (holds && !held && !first) {
    LogEvent(spdlog::level::info,
             shard->placed_learner ? "holding a shard as a learner (a move's target)"
                                   : "holding a shard",
             {{"shard", absl::StrCat(s)}});
  }
  if (shard->leading) {
    // Ship to every replica of the new placement, and to no other.
    for (auto it = shard->peers.begin(); it != shard->peers.end();) {
      const bool member = Holds(shard->voters, it->first) || Holds(shard->learners, it->first);
      it = member ? std::next(it) : shard->peers.erase(it);
    }
    const uint64_t next = log_->Last(s).seq + 1;
    for (const std::vector<uint32_t>* nodes : {&shard->voters, &shard->learners}) {
      for (uint32_t node : *nodes) {
        if (node != self && !shard->peers.count(node)) shard->peers[node].next_seq = next;
      }
    }
    AdvanceCommit(shard);
    if (!shard->pending.empty()) SweepCommitsSoon();
    KickShippers();
  }
  shard->changed.SignalAll();
}

absl::Status Replicator::MoveShard(uint32_t s, uint32_t from, uint32_t to) {
  if (s >= shards_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no shard ", s, ": the cluster has ", shards_.size()));
  }
  if (from == to) return absl::InvalidArgumentError("a move needs two different nodes");
  const std::string placement_key = Key(absl::StrCat("placement/", s));
  const std::string move_key = Key(absl::StrCat("moves/", s));
  absl::StatusOr<std::optional<EtcdKeyValue>> placement = etcd_->Get(placement_key);
  if (!placement.ok()) return placement.status();
  absl::StatusOr<std::optional<EtcdKeyValue>> moving = etcd_->Get(move_key);
  if (!moving.ok()) return moving.status();
  absl::StatusOr<std::optional<EtcdKeyValue>> live = etcd_->Get(Key(absl::StrCat("nodes/", to)));
  if (!live.ok()) return live.status();
  absl::StatusOr<std::optional<EtcdKeyValue>> draining =
      etcd_->Get(Key(absl::StrCat("draining/", to)));
  if (!draining.ok()) return draining.status();
  if (moving->has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", s, " is already moving (", (*moving)->value,
                     "); one move of a shard at a time: wait for it to finish"));
  }
  std::vector<uint32_t> voters, learners;
  if (!placement->has_value() || !ParsePlacement((*placement)->value, &voters, &learners)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", s, " has no readable placement in etcd"));
  }
  if (!Holds(voters, from)) {
    return absl::FailedPreconditionError(absl::StrCat("node ", from, " is not a voter of shard ", s,
                                                      " (voters: ", NodeList(voters), ")"));
  }
  if (Holds(voters, to) || Holds(learners, to)) {
    return absl::FailedPreconditionError(absl::StrCat("node ", to, " already holds shard ", s,
                                                      " (voters: ", NodeList(voters),
                                                      "; learners: ", NodeList(learners), ")"));
  }
  if (!live->has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", to, " is not live (it holds no etcd lease): start it, then move shards to it"));
  }
  if (draining->has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", to, " is draining: no shard moves to it"));
  }
  std::vector<uint32_t> with_target = learners;
  with_target.push_back(to);
  // The target holds nothing of the shard yet, so a re-seed key of it is
  // left from an earlier time it held the shard; the hand-off waits for
  // the re-seeds of the target that this move starts.
  absl::StatusOr<bool> started = etcd_->Txn(
      {{placement_key, (*placement)->mod_revision, std::nullopt}, {move_key, 0, std::nullopt}},
      {{placement_key, PlacementValue(voters, with_target), 0, false},
       {move_key, MoveValue(static_cast<int32_t>(from), static_cast<int32_t>(to), "adding"), 0,
        false},
       {Key(absl::StrCat("learner/", to, "/", s)), "", 0, true}});
  if (!started.ok()) return started.status();
  if (!*started) {
    return absl::AbortedError(
        absl::StrCat("the placement of shard ", s, " changed while the move was prepared; retry"));
  }
  LogEvent(spdlog::level::info, "shard move requested",
           {{"shard", absl::StrCat(s)}, {"from", absl::StrCat(from)}, {"to", absl::StrCat(to)}});
  return absl::OkStatus();
}

absl::Status Replicator::SetDraining(uint32_t node, bool draining) {
  absl::StatusOr<std::optional<EtcdKeyValue>> member =
      etcd_->Get(Key(absl::StrCat("members/", node)));
  if (!member.ok()) return member.status();
  if (!member->has_value()) {
    return absl::NotFoundError(absl::StrCat("node ", node, " has never joined this cluster"));
  }
  const std::string key = Key(absl::StrCat("draining/", node));
  if (draining) {
    absl::StatusOr<int64_t> put = etcd_->Put(key, "draining");
    if (!put.ok()) return put.status();
  } else {
    absl::StatusOr<int64_t> deleted = etcd_->Delete(key);
    if (!deleted.ok()) return deleted.status();
  }
  return absl::OkStatus();
}

bool Replicator::AdvanceMoves() {
  const absl::Time now = absl::Now();
  const absl::Duration tick = Tick(options_.lease_ttl);
  bool under_way = false;
  for (auto& shard_ptr : shards_) {
    Shard* shard = shard_ptr.get();
    if (!shard->replica) continue;
    core::MoveStep step;
    Move move;
    uint64_t epoch;
    std::vector<uint32_t> voters, learners;
    int64_t placement_revision;
    {
      absl::MutexLock lock(&shard->mu);
      if (!shard->leading || !shard->serving || shard->move.revision == 0) continue;
      under_way = true;
      move = shard->move;
      epoch = shard->lead_epoch;
      voters = shard->voters;
      learners = shard->learners;
      placement_revision = shard->placement_revision;
      core::MoveFacts facts;
      facts.state = move.state == "adding" ? core::MoveFacts::State::kAdding
                                           : core::MoveFacts::State::kPromoted;
      facts.self = options_.self;
      facts.from = static_cast<uint32_t>(move.from);
      facts.to = static_cast<uint32_t>(move.to);
      facts.voters = voters;
      facts.learners = learners;
      {
        absl::MutexLock nodes(&nodes_mu_);
        facts.target_live = live_.count(facts.to) > 0;
      }
      if (facts.target_live) {
        shard->move.target_gone_since = absl::InfiniteFuture();
      } else if (shard->move.target_gone_since == absl::InfiniteFuture()) {
        shard->move.target_gone_since = now;
      }
      facts.target_gone_for =
          facts.target_live ? absl::ZeroDuration() : now - shard->move.target_gone_since;
      facts.lease_ttl = options_.lease_ttl;
      facts.last_seq = log_->Last(shard->index).seq;
      facts.commit_seq = shard->commit_seq;
      for (const auto& [node, peer] : shard->peers) {
        facts.match[node] = peer.match_seq;
        if (peer.last_heard != absl::InfinitePast()) facts.silent_for[node] = now - peer.last_heard;
      }
      facts.heard_within = tick * 2;
      facts.target_may_stand = !Holds(shard->reseeding, facts.to);
      // Counted from the promotion (a new move record, so a new Move), not
      // from the copy that comes before it.
      if (facts.target_may_stand || facts.state == core::MoveFacts::State::kAdding) {
        shard->move.target_kept_since = absl::InfiniteFuture();
      } else if (shard->move.target_kept_since == absl::InfiniteFuture()) {
        shard->move.target_kept_since = now;
      }
      facts.target_kept_from_standing_for =
          facts.target_may_stand ? absl::ZeroDuration() : now - shard->move.target_kept_since;
      step = core::DecideMoveStep(facts);
    }
    if (step == core::MoveStep::kWait) continue;
    const uint32_t s = shard->index;
    const std::string placement_key = Key(absl::StrCat("placement/", s));
    const std::string move_key = Key(absl::StrCat("moves/", s));
    const uint32_t from = static_cast<uint32_t>(move.from);
    const uint32_t to = static_cast<uint32_t>(move.to);
    if (step == core::MoveStep::kHandOff) {
      // The source leads: the target (a voter now) takes the shard, and
      // removes the source as the new leader.
      HandOffShard(shard, move.to, now + tick, absl::StrCat("the shard moves to node ", to));
      continue;
    }
    // Only while this node still leads at `epoch`, the placement is the one
    // read and the move record unchanged: one change of the replica set at
    // a time, by the leader that sees it.
    std::vector<EtcdCompare> compares = {{Key(absl::StrCat("shards/", s)), 0, absl::StrCat(epoch)},
                                         {placement_key, placement_revision, std::nullopt},
                                         {move_key, move.revision, std::nullopt}};
    std::vector<EtcdWrite> writes;
    const char* done = "";
    if (step == core::MoveStep::kPromote) {
      std::vector<uint32_t> new_voters = voters, new_learners;
      for (uint32_t node : learners) {
        if (node != to) new_learners.push_back(node);
      }
      new_voters.push_back(to);
      writes = {{placement_key, PlacementValue(new_voters, new_learners), 0, false},
                {move_key, MoveValue(move.from, move.to, "promoted"), 0, false}};
      done = "move target caught up and votes";
    } else if (step == core::MoveStep::kRemove) {
      const std::vector<uint32_t> new_voters = core::VotersAfterRemoval(voters, from, to);
      // A re-seed key of the source's is of no use once it holds nothing.
      writes = {{placement_key, PlacementValue(new_voters, learners), 0, false},
                {move_key, "", 0, true},
                {Key(absl::StrCat("learner/", from, "/", s)), "", 0, true}};
      done = "shard moved";
    } else {
      std::vector<uint32_t> new_learners;
      for (uint32_t node : learners) {
        if (node != to) new_learners.push_back(node);
      }
      writes = {{placement_key, PlacementValue(voters, new_learners), 0, false},
                {move_key, "", 0, true},
                {Key(absl::StrCat("learner/", to, "/", s)), "", 0, true}};
      done = "shard move rolled back (its target is gone, or no longer a learner)";
    }
    absl::StatusOr<bool> changed = etcd_->Txn(compares, writes);
    if (!changed.ok() || !*changed) continue;
    LogEvent(step == core::MoveStep::kRollBack ? spdlog::level::warn : spdlog::level::info, done,
             {{"shard", absl::StrCat(s)}, {"from", absl::StrCat(from)}, {"to", absl::StrCat(to)}});
  }
  // What the steps changed is read at the next pass, which comes within a
  // third of a tick while a shard moves.
  return under_way;
}

}  // namespace dedup::server::cluster
