// The simulated node's elections (simulation_model.h): which shards it may
// stand for and when (core::StandWait, core::Sticky), the ballot for promises, and
// taking up or giving up the epoch.
#include "tests/replication/simulation_model.h"

namespace dedup::tests::replication::sim {

bool Simulation::MayStand(uint32_t node, uint32_t s) const {
  const Replica& r = nodes_[node].shards[s];
  if (!r.holds || r.leader >= 0 || r.leading || r.phase != Phase::kNone || !Holds(r.voters, node)) {
    return false;
  }
  const auto rank = std::find(r.voters.begin(), r.voters.end(), node) - r.voters.begin();
  const uint64_t handoff_epoch = r.handoff == static_cast<int32_t>(node) ? r.handoff_epoch : 0;
  if (Sticky(r, node, handoff_epoch)) return false;
  const Time wait = core::StandWait(rank, r.handoff, node, o_.lease_ttl);
  return now_ >= r.leaderless_since + wait && now_ >= r.next_election;
}

void Simulation::StartElections(uint32_t node) {
  Node& n = nodes_[node];
  if (!LeaseValid(node)) return;
  const uint32_t shards = static_cast<uint32_t>(n.shards.size());
  if (o_.election_threads == 0) {
    for (uint32_t s = 0; s < shards; ++s) {
      if (MayStand(node, s)) BeginElection(node, s);
    }
    return;
  }
  // Threads take shards in order, each holding on to its election.
  while (n.elections_running < o_.election_threads && n.scan_cursor < shards) {
    const uint32_t s = n.scan_cursor++;
    if (MayStand(node, s)) BeginElection(node, s);
  }
  if (n.scan_cursor >= shards && n.elections_running == 0) n.scan_cursor = 0;
}

void Simulation::BeginElection(uint32_t node, uint32_t s) {
  Replica& r = nodes_[node].shards[s];
  r.phase = Phase::kReading;
  r.round = ++rounds_;
  if (o_.election_threads > 0) {
    r.holds_thread = true;
    ++nodes_[node].elections_running;
  }
  // Three reads of etcd before the promises go out.
  ScheduleTimer(node, s, now_ + o_.etcd_delay * 3, r.round);
}

void Simulation::AskPromises(uint32_t node, uint32_t s) {
  Replica& r = nodes_[node].shards[s];
  const EtcdShard& k = etcd_[s];
  const uint64_t handoff_epoch = k.handoff == static_cast<int32_t>(node) ? k.handoff_epoch : 0;
  if (!EtcdReachable(node) || k.leader >= 0 || !Holds(k.voters, node) ||
      Sticky(r, node, handoff_epoch)) {
    EndElection(node, s, /*lost=*/false);
    return;
  }
  r.elect_epoch = std::max({k.epoch, r.promised, r.epoch}) + 1;
  r.elect_epoch_revision = k.epoch_revision;
  r.elect_placement_revision = k.placement_revision;
  r.elect_voters = k.voters;
  r.elect_learners = k.learners;
  r.promised = r.elect_epoch;
  r.ballot.emplace(k.voters, node, r.Last());
  r.phase = Phase::kPromises;
  Trace(absl::StrCat("node ", node, " stands for shard ", s, " epoch ", r.elect_epoch));
  for (uint32_t voter : k.voters) {
    if (voter == node) continue;
    Message ask = Request(Kind::kPromise, node, voter, s, r.elect_epoch);
    ask.handoff_epoch = handoff_epoch;
    Send(std::move(ask));
  }
  ScheduleTimer(node, s, now_ + PeerTimeout(o_.lease_ttl) + absl::Milliseconds(100), r.round);
  OnBallot(node, s);
}

void Simulation::OnBallot(uint32_t node, uint32_t s) {
  Replica& r = nodes_[node].shards[s];
  if (r.phase != Phase::kPromises) return;
  const Ballot::Outcome outcome = r.ballot->outcome();
  if (outcome == Ballot::Outcome::kWon) {
    if (r.ballot->best_node() == node) {
      FinishElection(node, s, true);
      return;
    }
    r.phase = Phase::kCatchUp;
    Send(Request(Kind::kReadLog, node, r.ballot->best_node(), s, r.elect_epoch));
    return;
  }
  if (outcome == Ballot::Outcome::kLost && !o_.ballot_waits_for_all) {
    r.epoch = std::max(r.epoch, r.ballot->refused_epoch());
    EndElection(node, s, /*lost=*/true);
  }
}

void Simulation::FinishElection(uint32_t node, uint32_t s, bool won_ballot) {
  Replica& r = nodes_[node].shards[s];
  EtcdShard& k = etcd_[s];
  const bool txn =
      won_ballot && LeaseValid(node) && EtcdReachable(node) && leases_.count(nodes_[node].lease) &&
      k.epoch_revision == r.elect_epoch_revision && k.leader < 0 &&
      k.placement_revision == r.elect_placement_revision && r.promised == r.elect_epoch;
  if (!txn) {
    EndElection(node, s, /*lost=*/true);
    return;
  }
  const uint64_t epoch = r.elect_epoch;
  k.epoch = epoch;
  k.epoch_revision = ++revision_;
  k.leader = static_cast<int32_t>(node);
  k.leader_epoch = epoch;
  k.leader_lease = nodes_[node].lease;
  k.handoff = -1;
  k.handoff_epoch = 0;
  // At most one leader per epoch, and epochs (hence tokens) only grow.
  auto& leaders = leaders_[s];
  if (!leaders.empty() && leaders.rbegin()->first >= epoch) {
    Fail(absl::StrCat("shard ", s, ": node ", node, " wins epoch ", epoch, " after epoch ",
                      leaders.rbegin()->first, " was won"));
  }
  leaders[epoch] = node;
  if (handed_to_[s].first >= 0) {
    if (handed_to_[s].first == static_cast<int32_t>(node)) {
      result_.handoff_gaps.push_back(now_ - handed_to_[s].second);
    }
    handed_to_[s].first = -1;
  }
  r.phase = Phase::kNone;
  r.ballot.reset();
  r.won_at = now_;
  r.leading = true;
  r.serving = false;
  r.lead_epoch = r.epoch = epoch;
  r.leader = static_cast<int32_t>(node);
  if (k.placement_revision > r.placement_revision) ApplyPlacement(node, s, k);
  r.peers.clear();
  AppendOwn(node, s);  // The first entry of the epoch.
  r.epoch_start = r.log.size();
  r.commit = 0;
  for (const auto* list : {&r.voters, &r.learners}) {
    for (uint32_t peer : *list) {
      if (peer != node) r.peers[peer].next = r.log.size();
    }
  }
  Trace(
      absl::StrCat("node ", node, " wins shard ", s, " epoch ", epoch, ", log to ", r.log.size()));
  if (r.holds_thread && !o_.election_waits_for_start) {
    r.holds_thread = false;
    --nodes_[node].elections_running;
  }
  AdvanceCommit(node, s);  // A shard of one voter commits at once.
  ShipAll(node, s, /*heartbeat=*/false);
  // The epoch's first entry commits within a lease, or the leader gives up.
  r.round = ++rounds_;
  r.start_round = r.round;
  ScheduleTimer(node, s, now_ + o_.lease_ttl, r.round);
  touched_.insert(s);
}

void Simulation::EndElection(uint32_t node, uint32_t s, bool lost) {
  Replica& r = nodes_[node].shards[s];
  r.phase = Phase::kNone;
  r.ballot.reset();
  if (lost) {
    Trace(absl::StrCat("node ", node, " loses its election for shard ", s));
    const int64_t jitter_ms = absl::ToInt64Milliseconds(o_.lease_ttl / 4);
    r.next_election = now_ + tick_ + absl::Milliseconds(random_() % (1 + jitter_ms));
  }
  if (r.holds_thread) {
    r.holds_thread = false;
    --nodes_[node].elections_running;
    StartElections(node);
  }
}

void Simulation::OnTimer(uint32_t node, uint32_t s, uint64_t round) {
  Replica& r = nodes_[node].shards[s];
  if (r.round != round) return;
  if (r.phase == Phase::kReading) {
    AskPromises(node, s);
  } else if (r.phase == Phase::kPromises || r.phase == Phase::kCatchUp) {
    if (r.phase == Phase::kPromises) {
      r.epoch = std::max(r.epoch, r.ballot->refused_epoch());
      if (r.ballot->outcome() == Ballot::Outcome::kWon) return;
    }
    EndElection(node, s, /*lost=*/true);
  } else if (r.leading && !r.serving && r.start_round == round) {
    // The first entry of the epoch did not commit within a lease.
    const uint64_t epoch = r.lead_epoch;
    StepDown(node, s, "no majority acknowledged the start of its epoch");
    ReleaseLeaderKey(node, s, epoch);
    if (r.holds_thread) {
      r.holds_thread = false;
      --nodes_[node].elections_running;
      StartElections(node);
    }
  }
}

}  // namespace dedup::tests::replication::sim
