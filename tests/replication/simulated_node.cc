// The simulated node's replication (simulation_model.h): sending, etcd
// leases and leadership keys as a node reads them, shipping and commit, the
// check that a majority still answers, the steps of a move, and the
// handling of every message.
#include "tests/replication/simulation_model.h"

namespace dedup::tests::replication::sim {

void Simulation::Send(Message m) {
  if (!Reachable(m.from, m.to) || Uniform() < o_.drop_rate) return;
  Time delay = Between(o_.min_delay, o_.max_delay);
  if (nodes_[m.from].slow || nodes_[m.to].slow) delay += absl::Milliseconds(100);
  Event e;
  e.kind = EventKind::kDeliver;
  e.at = now_ + delay;
  e.node = m.to;
  e.shard = m.shard;
  e.message = m;
  if (Uniform() < o_.duplicate_rate) {
    Event twice = e;
    twice.at += Between(absl::ZeroDuration(), o_.max_delay);
    Schedule(std::move(twice));
  }
  Schedule(std::move(e));
}

void Simulation::ExpireLeases() {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second > now_) {
      ++it;
      continue;
    }
    for (uint32_t s = 0; s < etcd_.size(); ++s) {
      if (etcd_[s].leader >= 0 && etcd_[s].leader_lease == it->first) {
        etcd_[s].leader = -1;
        ++revision_;
        Trace(absl::StrCat("etcd: lease of shard ", s, "'s leader ended"));
      }
    }
    it = leases_.erase(it);
  }
}

void Simulation::RenewLease(uint32_t node) {
  Node& n = nodes_[node];
  if (!EtcdReachable(node)) return;
  if (now_ - n.last_renewal < o_.lease_ttl / 4 && n.lease != 0 && leases_.count(n.lease)) return;
  if (n.lease == 0 || !leases_.count(n.lease)) {
    // Every leader key on the old lease is gone with it.
    for (uint32_t s = 0; s < n.shards.size(); ++s) {
      if (n.shards[s].leading) StepDown(node, s, "its etcd lease ended");
    }
    n.lease = next_lease_++;
    Trace(absl::StrCat("node ", node, " granted lease ", n.lease));
  }
  leases_[n.lease] = now_ + o_.lease_ttl;
  n.last_renewal = now_;
  n.lease_valid_until = now_ + TrustedLease(o_.lease_ttl);
}

bool Simulation::ReadLeaseValid(uint32_t node, uint32_t s) const {
  const Replica& r = nodes_[node].shards[s];
  const Time lease = core::ReadLease(o_.lease_ttl);
  return core::MajorityAnswered(r.voters, node, [&](uint32_t voter) {
    auto it = r.peers.find(voter);
    return it != r.peers.end() && now_ - it->second.acked_sent_at < lease;
  });
}

bool Simulation::Sticky(const Replica& r, uint32_t candidate, uint64_t handoff_epoch) const {
  if (!o_.read_lease) return false;
  return core::Sticky({r.heard_leader, r.heard_epoch, now_ - r.heard_at}, candidate, handoff_epoch,
                      o_.lease_ttl);
}

void Simulation::StepDown(uint32_t node, uint32_t s, const std::string& why) {
  Replica& r = nodes_[node].shards[s];
  if (!r.leading) return;
  r.leading = false;
  r.serving = false;
  r.leader = -1;
  r.leaderless_since = now_;
  Trace(
      absl::StrCat("node ", node, " stops leading shard ", s, " epoch ", r.lead_epoch, ": ", why));
}

bool Simulation::ReleaseLeaderKey(uint32_t node, uint32_t s, uint64_t epoch, int32_t handoff) {
  if (!EtcdReachable(node)) return false;
  EtcdShard& k = etcd_[s];
  if (k.leader != static_cast<int32_t>(node) || k.leader_epoch != epoch) return false;
  k.leader = -1;
  if (handoff >= 0) {
    k.handoff = handoff;
    k.handoff_epoch = epoch;
  }
  ++revision_;
  return true;
}

void Simulation::HandOffTo(uint32_t node, uint32_t s, uint32_t to, const std::string& why) {
  Replica& r = nodes_[node].shards[s];
  const uint64_t epoch = r.lead_epoch;
  StepDown(node, s, why);
  // Until it reads the handoff key back, it would contend at once.
  r.handoff = static_cast<int32_t>(to);
  r.next_election = std::max(r.next_election, now_ + o_.lease_ttl / 2);
  if (!ReleaseLeaderKey(node, s, epoch, static_cast<int32_t>(to))) return;
  handed_to_[s] = {static_cast<int32_t>(to), now_};
  if (o_.handoff_notices) Send(Request(Kind::kHandOffNotice, node, to, s, epoch));
}

void Simulation::OnHandOffNotice(const Message& m) {
  const uint32_t node = m.to, s = m.shard;
  Replica& r = nodes_[node].shards[s];
  core::NoticeFacts facts;
  facts.epoch = m.epoch;
  facts.replica = LeaseValid(node) && r.holds;
  facts.busy = r.leading || r.phase != Phase::kNone;
  facts.known_epoch = r.epoch;
  facts.heard_epoch = r.heard_epoch;
  facts.promised = r.promised;
  if (!core::TakesHandOffNotice(facts)) return;
  r.handoff = static_cast<int32_t>(node);
  r.handoff_epoch = m.epoch;
  if (r.leader >= 0) r.leaderless_since = now_;
  r.leader = -1;
  // Also within its back-off after a lost election: the others leave the
  // named target the first turn.
  r.next_election = -kNever;
  Trace(absl::StrCat("node ", node, " told it was handed shard ", s, " at epoch ", m.epoch));
  Node& n = nodes_[node];
  if (!MayStand(node, s)) return;
  if (o_.election_threads > 0 && n.elections_running >= o_.election_threads) return;
  BeginElection(node, s);
}

void Simulation::ApplyPlacement(uint32_t node, uint32_t s, const EtcdShard& view) {
  Replica& r = nodes_[node].shards[s];
  const bool holds = Holds(view.voters, node) || Holds(view.learners, node);
  const bool had_data = !r.log.empty();
  if (holds && !r.holds && r.placement_revision != 0 && had_data) {
    r.log.clear();
    r.durable = 0;
  }
  r.voters = view.voters;
  r.learners = view.learners;
  r.placement_revision = view.placement_revision;
  if (!holds && r.holds) {
    StepDown(node, s, "no longer holds the shard");
    r.log.clear();  // Moved away: the copy goes; the promise stays.
    r.durable = 0;
    Trace(absl::StrCat("node ", node, " drops its copy of shard ", s));
  }
  r.holds = holds;
  if (r.leading) {
    for (auto it = r.peers.begin(); it != r.peers.end();) {
      const bool member = Holds(r.voters, it->first) || Holds(r.learners, it->first);
      it = member ? std::next(it) : r.peers.erase(it);
    }
    for (const auto* list : {&r.voters, &r.learners}) {
      for (uint32_t peer : *list) {
        if (peer != node && !r.peers.count(peer)) r.peers[peer].next = r.log.size() + 1;
      }
    }
    AdvanceCommit(node, s);
  }
  touched_.insert(s);
}

void Simulation::HandBack(uint32_t node, uint32_t s) {
  Replica& r = nodes_[node].shards[s];
  if (!o_.hand_back || !r.leading || r.voters.empty() || r.voters.front() == node) return;
  const uint32_t home = r.voters.front();
  core::HandBackFacts f;
  f.serving = r.serving;
  f.moving = r.move_revision != 0;
  auto it = r.peers.find(home);
  f.first_is_peer = it != r.peers.end();
  if (f.first_is_peer) {
    const Peer& p = it->second;
    f.first_silent_for = p.last_heard == -kNever ? kNever : now_ - p.last_heard;
    f.first_live_for = p.live_since == kNever ? absl::ZeroDuration() : now_ - p.live_since;
  }
  f.leading_for = now_ - r.won_at;
  // Each hand-off writes to etcd; without a lease, etcd is out of reach.
  if (!core::ShouldHandBack(f, o_.lease_ttl) || !LeaseValid(node)) return;
  if (it->second.match < r.log.size()) return;  // Only to a voter holding the whole log.
  HandOffTo(node, s, home, "its first replica is back");
}

void Simulation::ReadLeadership(uint32_t node) {
  if (!EtcdReachable(node)) return;
  Node& n = nodes_[node];
  std::vector<uint32_t> stale;
  for (uint32_t s = 0; s < etcd_.size(); ++s) {
    const EtcdShard& view = etcd_[s];
    Replica& r = n.shards[s];
    r.handoff = view.handoff;
    r.handoff_epoch = view.handoff_epoch;
    r.epoch = std::max({r.epoch, view.leader_epoch, view.epoch});
    if (r.leading && r.phase == Phase::kNone && r.won_at < now_ &&
        (view.leader != static_cast<int32_t>(node) || view.leader_epoch != r.lead_epoch)) {
      // Before the placement: a deposed leader counts no acknowledgement
      // under voters it does not lead.
      StepDown(node, s,
               view.leader < 0 ? "its leader key in etcd is gone"
                               : absl::StrCat("etcd names node ", view.leader));
    }
    if (view.placement_revision > r.placement_revision) ApplyPlacement(node, s, view);
    if (view.move_revision != r.move_revision) {
      if (r.move_to != view.move_to) r.target_gone_since = kNever;
      r.move_from = view.move_from;
      r.move_to = view.move_to;
      r.move_state = view.move_state;
      r.move_revision = view.move_revision;
    }
    if (r.phase != Phase::kNone && r.phase != Phase::kReading) continue;
    if (r.leading && r.won_at >= now_) continue;
    if (view.leader < 0) {
      if (r.leader >= 0) r.leaderless_since = now_;
      r.leader = -1;
      continue;
    }
    if (view.leader == static_cast<int32_t>(node) && !r.leading) stale.push_back(s);
    r.leader = view.leader;
  }
  for (uint32_t s : stale) {
    etcd_[s].leader = -1;  // An earlier life's key: the shard may be taken over now.
    ++revision_;
  }
}

void Simulation::Ship(uint32_t node, uint32_t s, uint32_t peer, bool heartbeat) {
  Replica& r = nodes_[node].shards[s];
  Peer& p = r.peers[peer];
  const Time timeout = PeerTimeout(o_.lease_ttl);
  if (p.sent_at > -kNever && now_ - p.sent_at < timeout && !heartbeat) return;
  const uint64_t last = r.log.size();
  if (!heartbeat && p.next > last) return;
  Message m = Request(Kind::kAppend, node, peer, s, r.lead_epoch);
  p.next = std::min<uint64_t>(p.next, last + 1);
  m.prev = {r.EpochAt(p.next - 1), p.next - 1};
  for (uint64_t seq = p.next; seq <= last && m.entries.size() < kShipEntries; ++seq) {
    m.entries.push_back(r.log[seq - 1]);
  }
  m.commit = r.commit;
  m.sent_at = now_;
  p.sent_at = now_;
  Send(std::move(m));
}

void Simulation::ShipAll(uint32_t node, uint32_t s, bool heartbeat) {
  Replica& r = nodes_[node].shards[s];
  std::vector<uint32_t> peers;
  for (const auto& [peer, state] : r.peers) peers.push_back(peer);
  for (uint32_t peer : peers) Ship(node, s, peer, heartbeat);
}

void Simulation::RecordCommit(uint32_t node, uint32_t s) {
  const Replica& r = nodes_[node].shards[s];
  std::vector<uint64_t>& committed = committed_[s];
  const uint64_t known = std::min<uint64_t>(committed.size(), r.commit);
  if (known > 0 && r.EpochAt(known) != committed[known - 1]) {
    Fail(absl::StrCat("shard ", s, ": node ", node, " commits entry ", known, " of epoch ",
                      r.EpochAt(known), " where epoch ", committed[known - 1], "'s was committed"));
    return;
  }
  for (uint64_t seq = committed.size() + 1; seq <= r.commit; ++seq) {
    committed.push_back(r.EpochAt(seq));
    ++result_.committed;
  }
}

void Simulation::AdvanceCommit(uint32_t node, uint32_t s) {
  Replica& r = nodes_[node].shards[s];
  if (!r.leading) return;
  std::map<uint32_t, uint64_t> held;
  held[node] =
      o_.leader_counts_synced_entries ? std::min<uint64_t>(r.durable, r.log.size()) : r.log.size();
  for (const auto& [peer, p] : r.peers) held[peer] = p.match;
  const uint64_t before = r.commit;
  r.commit = core::NextCommit(r.commit, core::MajorityHolds(r.voters, held), r.epoch_start);
  if (r.commit == before) return;
  RecordCommit(node, s);
  if (!r.serving && r.commit >= r.epoch_start) {
    r.serving = true;
    ++result_.elections_won;
    Trace(absl::StrCat("node ", node, " serves shard ", s, " at epoch ", r.lead_epoch));
    if (r.holds_thread) {
      r.holds_thread = false;
      --nodes_[node].elections_running;
    }
  }
  touched_.insert(s);
}

void Simulation::CheckQuorum(uint32_t node, uint32_t s) {
  Replica& r = nodes_[node].shards[s];
  if (!o_.leader_checks_quorum || !r.leading || !r.serving) return;
  const Time window = core::QuorumWindow(o_.lease_ttl);
  if (now_ - r.won_at < window) return;
  const std::map<uint32_t, Time>& heard = nodes_[node].heard;
  const bool answered = core::MajorityAnswered(r.voters, node, [&](uint32_t voter) {
    auto it = heard.find(voter);
    return it != heard.end() && now_ - it->second <= window;
  });
  if (answered) return;
  const uint64_t epoch = r.lead_epoch;
  StepDown(node, s, "no majority of voters answered for a while");
  r.next_election = now_ + o_.lease_ttl;
  ReleaseLeaderKey(node, s, epoch);
}

void Simulation::AdvanceMove(uint32_t node, uint32_t s) {
  Replica& r = nodes_[node].shards[s];
  if (!r.leading || !r.serving || r.move_revision == 0) return;
  const uint32_t to = static_cast<uint32_t>(r.move_to);
  const bool target_live = nodes_[to].lease != 0 && leases_.count(nodes_[to].lease) > 0;
  if (target_live) {
    r.target_gone_since = kNever;
  } else if (r.target_gone_since == kNever) {
    r.target_gone_since = now_;
  }
  MoveFacts f;
  f.state = r.move_state;
  f.self = node;
  f.from = static_cast<uint32_t>(r.move_from);
  f.to = to;
  f.voters = r.voters;
  f.learners = r.learners;
  f.target_live = target_live;
  f.target_gone_for = target_live ? absl::ZeroDuration() : now_ - r.target_gone_since;
  f.lease_ttl = o_.lease_ttl;
  f.last_seq = r.log.size();
  f.commit_seq = r.commit;
  for (const auto& [peer, p] : r.peers) {
    f.match[peer] = p.match;
    if (p.last_heard > -kNever) f.silent_for[peer] = now_ - p.last_heard;
  }
  f.heard_within = tick_ * 2;
  const MoveStep step = o_.move_rule(f);
  if (step == MoveStep::kWait) return;
  if (!EtcdReachable(node)) return;
  EtcdShard& k = etcd_[s];
  if (k.epoch != r.lead_epoch || k.placement_revision != r.placement_revision ||
      k.move_revision != r.move_revision) {
    return;
  }
  Trace(absl::StrCat("node ", node, " moves shard ", s, " from ", f.from, " to ", to, ": ",
                     core::MoveStepName(step), " (commit ", r.commit, ", target holds ",
                     f.match[to], ")"));
  if (step == MoveStep::kHandOff) {
    if (f.match[to] < r.log.size()) return;  // Handed only to a replica holding the whole log.
    HandOffTo(node, s, to, "hands the shard to the move's target");
    return;
  }
  if (step == MoveStep::kPromote) {
    std::vector<uint32_t> learners;
    for (uint32_t l : k.learners) {
      if (l != to) learners.push_back(l);
    }
    k.voters.push_back(to);
    k.learners = learners;
    k.move_state = MoveFacts::State::kPromoted;
    k.placement_revision = k.move_revision = ++revision_;
  } else if (step == MoveStep::kRemove) {
    k.voters = core::VotersAfterRemoval(k.voters, f.from, to);
    k.placement_revision = ++revision_;
    k.move_from = k.move_to = -1;
    k.move_revision = 0;
    ++result_.moves_done;
  } else {
    std::vector<uint32_t> learners;
    for (uint32_t l : k.learners) {
      if (l != to) learners.push_back(l);
    }
    k.learners = learners;
    k.placement_revision = ++revision_;
    k.move_from = k.move_to = -1;
    k.move_revision = 0;
  }
  touched_.insert(s);
  ReadLeadership(node);
}

void Simulation::OnAppend(const Message& m) {
  Replica& r = nodes_[m.to].shards[m.shard];
  Message reply = ReplyTo(m, Kind::kAppendReply);
  reply.prev = m.prev;
  reply.entries = m.entries;
  auto answer = [&](AppendResult result) {
    reply.result = result;
    reply.last = r.Last();
    reply.promised = r.promised;
    Send(reply);
  };
  if (!r.holds) return answer(AppendResult::kNotReplica);
  if (m.epoch < r.promised) return answer(AppendResult::kFenced);
  // Whatever follows, the leader counts this answer towards its read
  // lease: no promise to another candidate for a while.
  reply.sent_at = m.sent_at;
  r.heard_leader = static_cast<int32_t>(m.from);
  r.heard_epoch = m.epoch;
  r.heard_at = now_;
  if (r.leading && m.epoch >= r.lead_epoch) {
    StepDown(m.to, m.shard, absl::StrCat("node ", m.from, " leads epoch ", m.epoch));
  }
  r.leader = static_cast<int32_t>(m.from);
  r.epoch = std::max(r.epoch, m.epoch);
  if (m.prev.seq > r.log.size() || r.EpochAt(m.prev.seq) != m.prev.epoch) {
    return answer(AppendResult::kMismatch);
  }
  r.promised = std::max(r.promised, m.epoch);
  for (size_t i = 0; i < m.entries.size(); ++i) {
    const uint64_t seq = m.prev.seq + 1 + i;
    if (seq <= r.log.size()) {
      if (r.log[seq - 1] == m.entries[i]) continue;
      r.log.resize(seq - 1);  // An uncommitted tail of an older epoch.
      r.durable = std::min<uint64_t>(r.durable, seq - 1);
    }
    r.log.push_back(m.entries[i]);
  }
  if (m.unsynced) {
    // Durable once the sync is done; a crash before loses it.
    Event synced;
    synced.kind = EventKind::kPersist;
    synced.at = now_ + DiskDelay();
    synced.node = m.to;
    synced.shard = m.shard;
    synced.tag = nodes_[m.to].incarnation;
    synced.message.prev = r.Last();
    Schedule(std::move(synced));
  } else {
    r.durable = r.log.size();
  }
  touched_.insert(m.shard);
  answer(AppendResult::kAppended);
}

void Simulation::OnAppendReply(const Message& m) {
  nodes_[m.to].heard[m.from] = now_;
  Replica& r = nodes_[m.to].shards[m.shard];
  if (!r.leading || r.lead_epoch != m.epoch || !r.peers.count(m.from)) return;
  Peer& p = r.peers[m.from];
  p.sent_at = -kNever;
  if (m.result == AppendResult::kNotReplica) return;
  if (p.live_since == kNever || now_ - p.last_heard > tick_ * 2) p.live_since = now_;
  p.last_heard = now_;
  const uint64_t held = m.prev.seq + m.entries.size();
  if (m.result == AppendResult::kAppended || m.result == AppendResult::kMismatch) {
    p.acked_sent_at = std::max(p.acked_sent_at, m.sent_at);
  }
  switch (m.result) {
    case AppendResult::kAppended:
      p.match = std::max(p.match, held);
      p.next = std::max(p.next, held + 1);
      AdvanceCommit(m.to, m.shard);
      break;
    case AppendResult::kMismatch:
      p.match = std::min(p.match, m.last.seq);
      p.next = std::max<uint64_t>(1, std::min(m.last.seq + 1, m.prev.seq));
      break;
    case AppendResult::kFenced: {
      const uint64_t epoch = r.lead_epoch;
      StepDown(m.to, m.shard, absl::StrCat("node ", m.from, " promised ", m.promised));
      ReleaseLeaderKey(m.to, m.shard, epoch);
      return;
    }
    default:
      break;
  }
  if (r.leading && p.next <= r.log.size()) Ship(m.to, m.shard, m.from, false);
}

void Simulation::OnPromise(const Message& m) {
  Replica& r = nodes_[m.to].shards[m.shard];
  Message reply = ReplyTo(m, Kind::kPromiseReply);
  reply.promised = r.promised;
  reply.last = r.Last();
  // A leader (with its lease) refuses: the candidate read etcd before it
  // won, and a promise would fence a live leader starting its epoch.
  core::PromiseFacts facts;
  facts.epoch = m.epoch;
  facts.promised = r.promised;
  facts.voter = r.holds && Holds(r.voters, m.to);
  facts.leading = r.leading && LeaseValid(m.to);
  facts.sticky = Sticky(r, m.from, m.handoff_epoch);
  if (core::DecidePromise(facts) == core::PromiseAnswer::kGrant) {
    r.promised = m.epoch;
    if (r.leading && m.epoch > r.lead_epoch) {
      StepDown(m.to, m.shard, absl::StrCat("promised epoch ", m.epoch, " to node ", m.from));
    }
    r.next_election = std::max(r.next_election, now_ + tick_ * 4);
    reply.granted = true;
    reply.promised = m.epoch;
  }
  Send(reply);
}

void Simulation::OnPromiseReply(const Message& m) {
  Replica& r = nodes_[m.to].shards[m.shard];
  if (r.phase != Phase::kPromises || r.elect_epoch != m.epoch) return;
  if (m.granted) {
    r.ballot->Granted(m.from, m.last);
  } else {
    r.ballot->Refused(m.from, m.promised);
  }
  OnBallot(m.to, m.shard);
}

void Simulation::OnMessage(const Message& m) {
  Replica& r = nodes_[m.to].shards[m.shard];
  switch (m.kind) {
    case Kind::kAppend:
      return OnAppend(m);
    case Kind::kAppendReply:
      return OnAppendReply(m);
    case Kind::kPromise:
      return OnPromise(m);
    case Kind::kPromiseReply:
      return OnPromiseReply(m);
    case Kind::kReadLog: {
      Message reply = ReplyTo(m, Kind::kReadLogReply);
      reply.entries = r.log;
      Send(std::move(reply));
      return;
    }
    case Kind::kHandOffNotice:
      return OnHandOffNotice(m);
    case Kind::kReadLogReply:
      if (r.phase != Phase::kCatchUp || r.elect_epoch != m.epoch) return;
      // Copied as appends of the candidate's epoch: refused once this
      // replica has promised (or accepted) a later one.
      if (r.promised > r.elect_epoch ||
          Position{m.entries.empty() ? 0 : m.entries.back(), m.entries.size()} < r.ballot->best()) {
        EndElection(m.to, m.shard, /*lost=*/true);
        return;
      }
      r.log = m.entries;
      r.durable = r.log.size();
      FinishElection(m.to, m.shard, true);
      return;
  }
}

void Simulation::AppendOwn(uint32_t node, uint32_t s) {
  Replica& r = nodes_[node].shards[s];
  r.log.push_back(r.lead_epoch);
  if (!nodes_[node].slow_disk) {
    r.durable = r.log.size();
    return;
  }
  Event synced;
  synced.kind = EventKind::kPersist;
  synced.at = now_ + DiskDelay();
  synced.node = node;
  synced.shard = s;
  synced.tag = nodes_[node].incarnation;
  synced.message.prev = {r.lead_epoch, r.log.size()};
  Schedule(std::move(synced));
}

void Simulation::OnPersist(const Event& e) {
  Replica& r = nodes_[e.node].shards[e.shard];
  const Position entry = e.message.prev;
  // A later sync covers every entry before it; an entry replaced since
  // (an older epoch's tail) is not this one.
  if (r.log.size() < entry.seq || r.EpochAt(entry.seq) != entry.epoch) return;
  r.durable = std::max(r.durable, entry.seq);
  AdvanceCommit(e.node, e.shard);
  touched_.insert(e.shard);
}

void Simulation::OnWrite(uint32_t s) {
  for (uint32_t node = 0; node < nodes_.size(); ++node) {
    if (!Runs(node) || !MayAnswer(node, s)) continue;
    AppendOwn(node, s);
    ShipAll(node, s, /*heartbeat=*/false);
    AdvanceCommit(node, s);
    touched_.insert(s);
  }
}

void Simulation::OnTick(uint32_t node) {
  RenewLease(node);
  Node& n = nodes_[node];
  for (uint32_t s = 0; s < n.shards.size(); ++s) {
    Replica& r = n.shards[s];
    if (r.leading && !LeaseValid(node) && r.phase == Phase::kNone) {
      StepDown(node, s, "could not renew its etcd lease in time");
    }
  }
  ReadLeadership(node);
  for (uint32_t s = 0; s < n.shards.size(); ++s) {
    Replica& r = n.shards[s];
    if (!r.leading) continue;
    ShipAll(node, s, /*heartbeat=*/true);
    CheckQuorum(node, s);
    AdvanceMove(node, s);
    HandBack(node, s);
  }
  StartElections(node);
}

}  // namespace dedup::tests::replication::sim
