// The Replicator's planned hand-offs (docs/replication.md §6): a stopping
// node's, a hand-back to the first replica, and the notices that tell the
// target at once.

#include "server/cluster/replicator.h"
#include "server/cluster/replicator_internal.h"

namespace dedup::server::cluster {

void Replicator::QueueHandOffNotice(uint32_t peer, uint32_t shard, uint64_t epoch) {
  rv1::HandOffNotice notice;
  notice.set_shard(shard);
  notice.set_epoch(epoch);
  absl::MutexLock lock(&ship_mu_);
  handoff_notices_[peer].push_back(std::move(notice));
  ++ship_generation_;
}

void Replicator::TakeHandOffNotices(const rv1::ShipRequest& request) {
  if (request.handoffs().empty() || !LeaseValid() || handing_off_.load() || stopped_.load()) {
    return;
  }
  const int32_t self = static_cast<int32_t>(options_.self);
  std::vector<Shard*> due;
  for (const rv1::HandOffNotice& notice : request.handoffs()) {
    if (notice.shard() >= shards_.size()) continue;
    Shard& shard = *shards_[notice.shard()];
    absl::MutexLock lock(&shard.mu);
    core::NoticeFacts facts;
    facts.epoch = notice.epoch();
    facts.replica = shard.replica;
    facts.busy = shard.leading || shard.electing;
    facts.known_epoch = shard.epoch;
    facts.heard_epoch = shard.heard_epoch;
    facts.promised = log_->Promised(notice.shard());
    if (!core::TakesHandOffNotice(facts)) continue;
    // What the next read of etcd would find: no leader, handed here.
    shard.handoff_to = self;
    shard.handoff_epoch = notice.epoch();
    shard.told_handoff_at = absl::Now();
    if (shard.leader >= 0) shard.leaderless_since = absl::Now();
    shard.leader = -1;
    // Also within the back-off after an election it lost: the other
    // voters leave the named target the first turn (core::StandWait).
    shard.next_election = absl::InfinitePast();
    if (!DueForElection(shard, absl::Now())) continue;
    shard.election_queued = true;
    due.push_back(&shard);
  }
  handoff_notices_stood_ += due.size();
  QueueElections(due);
}

void Replicator::HandOff(absl::Duration timeout) {
  handing_off_ = true;
  const absl::Time deadline = absl::Now() + timeout;
  for (auto& shard : shards_) {
    if (shard->replica) HandOffShard(shard.get(), -1, deadline, "stopping");
  }
  // The shipping loops tell the targets (QueueHandOffNotice) before the
  // node stops them; a notice lost here costs its target one read of etcd.
  absl::MutexLock lock(&ship_mu_);
  auto told = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ship_mu_) {
    if (handoff_notices_sending_ > 0) return false;
    for (const auto& [peer, notices] : handoff_notices_) {
      if (!notices.empty()) return false;
    }
    return true;
  };
  ship_mu_.AwaitWithDeadline(absl::Condition(&told),
                             std::min(deadline, absl::Now() + Tick(options_.lease_ttl)));
}

bool Replicator::HandOffShard(Shard* shard, int32_t to, absl::Time deadline,
                              absl::string_view why) {
  const uint32_t s = shard->index;
  int32_t target = -1;
  uint64_t epoch;
  {
    absl::MutexLock lock(&shard->mu);
    if (!shard->leading) return false;
    // New calls answer UNAVAILABLE from now on, and clients retry.
    shard->serving = false;
    epoch = shard->lead_epoch;
    auto caught_up = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
      if (!shard->leading) return true;
      const uint64_t last = log_->Last(s).seq;
      for (const auto& [node, peer] : shard->peers) {
        // Only a voter can be elected: a learner is skipped.
        if (peer.match_seq >= last && Holds(shard->voters, node) &&
            (to < 0 || static_cast<int32_t>(node) == to)) {
          target = static_cast<int32_t>(node);
          return true;
        }
      }
      return false;
    };
    shard->mu.AwaitWithDeadline(absl::Condition(&caught_up), deadline);
    if (!shard->leading) return false;
    if (target < 0 && to >= 0) {
      // The preferred node did not catch up: keep leading.
      shard->serving = true;
      return false;
    }
    StepDown(shard,
             target >= 0 ? absl::StrCat(why, ": handed to node ", target) : std::string(why));
    // Until the transaction below, a read of etcd would take the leader
    // key for a stale one and delete it, and the target would go unnamed.
    shard->handing_over = true;
    if (target >= 0) {
      // Until this node reads the handoff key back, it would contend for
      // the shard as if nobody had been named: as the shard's first voter,
      // at once, and it would win it back from its own target.
      shard->handoff_to = target;
      shard->next_election = std::max(shard->next_election, absl::Now() + options_.lease_ttl / 2);
    }
  }
  const std::string key = Key(absl::StrCat("leader/", s));
  std::vector<EtcdWrite> writes = {{key, "", 0, true}};
  if (target >= 0) {
    writes.push_back(
        {Key(absl::StrCat("handoff/", s)), absl::StrCat(target, " ", epoch), 0, false});
  }
  absl::StatusOr<bool> written =
      etcd_->Txn({{key, 0, absl::StrCat(options_.self, " ", epoch)}}, writes);
  {
    absl::MutexLock lock(&shard->mu);
    shard->handing_over = false;
  }
  if (target >= 0 && !(written.ok() && *written)) {
    // The shard is elected without the hand-off's shortcut: once this
    // node's read lease has ended on its followers (core::Stickiness).
    std::string reason(written.status().message());
    if (written.ok()) {
      absl::StatusOr<std::optional<EtcdKeyValue>> now = etcd_->Get(key);
      reason = !now.ok()           ? std::string("the leader key no longer named this node")
               : !now->has_value() ? std::string("the leader key was gone")
                                   : absl::StrCat("the leader key named \"", (*now)->value, "\"");
    }
    LogEvent(spdlog::level::warn, "a hand-off was not written to etcd",
             {{"shard", absl::StrCat(s)},
              {"epoch", absl::StrCat(epoch)},
              {"target", absl::StrCat(target)},
              {"error", reason}});
  }
  if (target >= 0 && written.ok() && *written) {
    // Only once etcd names no leader: the target's election begins with
    // that check, and would otherwise give up until its next read.
    QueueHandOffNotice(static_cast<uint32_t>(target), s, epoch);
    ++handoff_notices_sent_;
  }
  return target >= 0;
}

void Replicator::BalanceLeaders() {
  // A few shards per pass at most (kBalancePerPass), so that moving
  // leadership back never takes many shards away at once; one per pass
  // took a new cluster of 1,024 shards over a minute to settle.
  const absl::Time now = absl::Now();
  size_t handed = 0;
  // Only to a node with a live etcd lease: one that answers its peers but
  // not etcd cannot take a shard, and each shard handed to it would wait
  // for another election, then be handed to it again.
  std::set<uint32_t> live;
  {
    absl::MutexLock nodes(&nodes_mu_);
    live = live_;
  }
  for (auto& shard : shards_) {
    // Each hand-off writes to etcd: without a lease, etcd is out of reach
    // and every write would wait out its deadline.
    if (!LeaseValid()) return;
    if (!shard->replica) continue;
    uint32_t home;
    {
      absl::MutexLock lock(&shard->mu);
      if (!shard->leading || shard->voters.empty()) continue;
      home = shard->voters.front();
      if (home == options_.self || live.count(home) == 0) continue;
      core::HandBackFacts facts;
      facts.serving = shard->serving;
      facts.moving = shard->move.revision != 0;
      auto it = shard->peers.find(home);
      facts.first_is_peer = it != shard->peers.end();
      if (facts.first_is_peer) {
        facts.first_silent_for = now - it->second.last_heard;
        facts.first_live_for = it->second.live_since == absl::InfiniteFuture()
                                   ? absl::ZeroDuration()
                                   : now - it->second.live_since;
      }
      facts.leading_for = now - shard->leading_since;
      if (!core::ShouldHandBack(facts, options_.lease_ttl)) continue;
    }
    HandOffShard(shard.get(), static_cast<int32_t>(home), now + Tick(options_.lease_ttl),
                 "its first replica is back");
    if (++handed == kBalancePerPass) return;
  }
}

}  // namespace dedup::server::cluster
