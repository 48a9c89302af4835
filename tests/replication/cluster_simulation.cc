#include "tests/replication/cluster_simulation.h"

#include "tests/replication/simulation_model.h"

namespace dedup::tests::replication {
namespace sim {

void Simulation::Crash(uint32_t node) {
  Node& n = nodes_[node];
  n.up = false;
  n.paused = false;
  held_.erase(node);
  Trace(absl::StrCat("node ", node, " crashes"));
}

void Simulation::Restart(uint32_t node) {
  Node& fresh = nodes_[node];
  std::vector<Replica> kept(fresh.shards.size());
  for (size_t s = 0; s < kept.size(); ++s) {
    kept[s].log = fresh.shards[s].log;
    // What its disk had not synced is gone.
    kept[s].log.resize(std::min<uint64_t>(kept[s].log.size(), fresh.shards[s].durable));
    kept[s].durable = kept[s].log.size();
    kept[s].promised = fresh.shards[s].promised;
    kept[s].leaderless_since = now_;
    if (kept[s].promised > 0) {
      // It may have acknowledged a leader just before it went down.
      kept[s].heard_leader = -2;
      kept[s].heard_epoch = kept[s].promised;
      kept[s].heard_at = now_;
    }
  }
  const uint64_t incarnation = fresh.incarnation + 1;
  fresh = Node();
  fresh.shards = std::move(kept);
  fresh.incarnation = incarnation;
  Trace(absl::StrCat("node ", node, " restarts"));
  Event tick;
  tick.kind = EventKind::kTick;
  tick.at = now_;
  tick.node = node;
  tick.tag = incarnation;
  Schedule(std::move(tick));
}

void Simulation::RevokeLease(uint32_t node) {
  const int64_t lease = nodes_[node].lease;
  if (lease == 0 || !leases_.count(lease)) return;
  Trace(absl::StrCat("etcd ends node ", node, "'s lease ", lease, " early"));
  leases_[lease] = now_;
  ExpireLeases();
}

void Simulation::InjectFault() {
  std::vector<int> kinds;
  if (o_.crashes) kinds.push_back(0);
  if (o_.pauses) kinds.push_back(1);
  if (o_.partitions) kinds.push_back(2);
  if (o_.etcd_isolation) kinds.push_back(3);
  if (o_.slow_nodes) kinds.push_back(4);
  if (o_.early_revocations) kinds.push_back(5);
  if (o_.slow_disks) kinds.push_back(6);
  if (kinds.empty()) return;
  const uint32_t node = random_() % nodes_.size();
  const Time lasting = Between(absl::Milliseconds(100), o_.fault_for);
  Event heal;
  heal.kind = EventKind::kHeal;
  heal.at = now_ + lasting;
  const int kind = kinds[random_() % kinds.size()];
  ++result_.faults;
  if (kind == 0 && nodes_[node].up) {
    Crash(node);
    heal.heal = [this, node] { Restart(node); };
  } else if (kind == 1 && Runs(node)) {
    Pause(node, lasting);
    return;
  } else if (kind == 2) {
    std::vector<std::pair<uint32_t, uint32_t>> links;
    const bool one_way = Uniform() < 0.5;
    for (uint32_t other = 0; other < nodes_.size(); ++other) {
      if (other == node || Uniform() < 0.3) continue;
      links.push_back({node, other});
      if (!one_way) links.push_back({other, node});
    }
    for (const auto& link : links) cut_.insert(link);
    Trace(absl::StrCat("node ", node, " partitioned (", links.size(), " links cut)"));
    heal.heal = [this, links] {
      for (const auto& link : links) cut_.erase(link);
    };
  } else if (kind == 3) {
    nodes_[node].etcd_cut = true;
    Trace(absl::StrCat("node ", node, " cut off from etcd"));
    heal.heal = [this, node] { nodes_[node].etcd_cut = false; };
  } else if (kind == 4) {
    nodes_[node].slow = true;
    heal.heal = [this, node] { nodes_[node].slow = false; };
  } else if (kind == 5) {
    RevokeLease(node);
    return;
  } else if (kind == 6) {
    nodes_[node].slow_disk = true;
    Trace(absl::StrCat("node ", node, "'s disk is slow"));
    heal.heal = [this, node] { nodes_[node].slow_disk = false; };
  } else {
    return;
  }
  Schedule(std::move(heal));
}

void Simulation::Pause(uint32_t node, Time lasting) {
  nodes_[node].paused = true;
  Trace(absl::StrCat("node ", node, " paused"));
  Event heal;
  heal.kind = EventKind::kHeal;
  heal.at = now_ + lasting;
  heal.heal = [this, node] {
    if (!nodes_[node].paused) return;
    nodes_[node].paused = false;
    Trace(absl::StrCat("node ", node, " resumed"));
    for (Event e : held_[node]) {
      e.at = now_;
      Schedule(std::move(e));
    }
    held_.erase(node);
  };
  Schedule(std::move(heal));
}

void Simulation::InjectScripted(const ScriptedFault& fault) {
  uint32_t node = 0;
  if (fault.node >= 0) {
    node = static_cast<uint32_t>(fault.node);
  } else {
    std::vector<uint32_t> led(nodes_.size(), 0);
    for (const EtcdShard& k : etcd_) {
      if (k.leader >= 0) ++led[k.leader];
    }
    node = static_cast<uint32_t>(std::max_element(led.begin(), led.end()) - led.begin());
  }
  Event heal;
  heal.kind = EventKind::kHeal;
  heal.at = now_ + fault.lasting;
  switch (fault.kind) {
    case ScriptedFault::Kind::kPause:
      Pause(node, fault.lasting);
      return;
    case ScriptedFault::Kind::kCrash:
      Crash(node);
      heal.heal = [this, node] { Restart(node); };
      break;
    case ScriptedFault::Kind::kCutFromPeers: {
      std::vector<std::pair<uint32_t, uint32_t>> links;
      for (uint32_t other = 0; other < nodes_.size(); ++other) {
        if (other == node) continue;
        links.push_back({node, other});
        links.push_back({other, node});
      }
      for (const auto& link : links) cut_.insert(link);
      Trace(absl::StrCat("node ", node, " cut off from its peers"));
      heal.heal = [this, links] {
        for (const auto& link : links) cut_.erase(link);
      };
      break;
    }
    case ScriptedFault::Kind::kRevokeLease:
      RevokeLease(node);
      return;
    case ScriptedFault::Kind::kCutFromEtcd:
      nodes_[node].etcd_cut = true;
      Trace(absl::StrCat("node ", node, " cut off from etcd"));
      heal.heal = [this, node] { nodes_[node].etcd_cut = false; };
      break;
  }
  Schedule(std::move(heal));
}

void Simulation::StartMove() {
  const uint32_t s = random_() % etcd_.size();
  EtcdShard& k = etcd_[s];
  if (k.move_revision != 0 || !k.learners.empty()) return;
  std::vector<uint32_t> outside;
  for (uint32_t node = 0; node < nodes_.size(); ++node) {
    if (!Holds(k.voters, node)) outside.push_back(node);
  }
  if (outside.empty()) return;
  const uint32_t from = k.voters[random_() % k.voters.size()];
  const uint32_t to = outside[random_() % outside.size()];
  k.learners.push_back(to);
  k.move_from = static_cast<int32_t>(from);
  k.move_to = static_cast<int32_t>(to);
  k.move_state = MoveFacts::State::kAdding;
  k.placement_revision = k.move_revision = ++revision_;
  Trace(absl::StrCat("operator moves shard ", s, " from ", from, " to ", to));
}

void Simulation::CheckShard(uint32_t s) {
  const std::vector<uint64_t>& committed = committed_[s];
  if (committed.empty()) return;
  const uint64_t seq = committed.size();
  std::map<uint32_t, uint64_t> held;
  for (uint32_t node = 0; node < nodes_.size(); ++node) {
    const Replica& r = nodes_[node].shards[s];
    // A node holds the committed prefix when its entry at the last
    // committed seq is the committed one (logs that share an entry share
    // everything before it).
    if (r.log.size() >= seq && r.durable >= seq && r.log[seq - 1] == committed[seq - 1]) {
      held[node] = seq;
    }
  }
  if (!core::EveryMajorityHolds(etcd_[s].voters, held, seq)) {
    std::vector<std::string> holders;
    for (const auto& [node, h] : held) holders.push_back(absl::StrCat(node));
    Fail(absl::StrCat("shard ", s, ": committed entry ", seq, " is held by nodes {",
                      absl::StrJoin(holders, ","), "} of voters {",
                      absl::StrJoin(etcd_[s].voters, ","),
                      "}: a majority of the voters could elect a leader without it"));
  }
}

void Simulation::CheckLiveness() {
  for (uint32_t s = 0; s < etcd_.size(); ++s) {
    const std::vector<uint32_t>& voters = etcd_[s].voters;
    // The largest set of voters that run, reach etcd and reach each other
    // both ways (replica sets are small: every subset is tried).
    std::vector<uint32_t> group;
    for (uint32_t mask = 1; mask < (1u << voters.size()); ++mask) {
      std::vector<uint32_t> members;
      bool joined = true;
      for (uint32_t i = 0; i < voters.size() && joined; ++i) {
        if (!(mask & (1u << i))) continue;
        const uint32_t v = voters[i];
        joined = EtcdReachable(v);
        for (uint32_t m : members) joined = joined && Reachable(v, m) && Reachable(m, v);
        members.push_back(v);
      }
      if (joined && members.size() > group.size()) group = members;
    }
    // Reads are answered by a node that serves with a valid lease: never
    // two at once.
    std::vector<uint32_t> serving;
    for (uint32_t node = 0; node < nodes_.size(); ++node) {
      if (MayAnswer(node, s)) serving.push_back(node);
    }
    if (serving.size() > 1) {
      Fail(absl::StrCat("shard ", s, " is served by nodes {", absl::StrJoin(serving, ","),
                        "} at once"));
    }
    bool led = false;
    for (uint32_t node = 0; node < nodes_.size() && !led; ++node) {
      if (!Runs(node) || !MayAnswer(node, s)) continue;
      uint32_t reached = 0;
      for (uint32_t v : voters)
        reached += (v == node || (Runs(v) && Reachable(node, v) && Reachable(v, node)));
      led = reached >= core::Majority(voters.size());
    }
    const bool could_lead = group.size() >= core::Majority(voters.size());
    // The bound runs from when this group formed: a group that changed
    // (a voter crashed, or came back) starts it anew.
    if (led || !could_lead || group != group_[s]) {
      leaderless_since_[s] = kNever;
      group_[s] = could_lead ? group : std::vector<uint32_t>();
      if (led || !could_lead) continue;
    }
    if (leaderless_since_[s] == kNever) leaderless_since_[s] = now_;
    const Time without = now_ - leaderless_since_[s];
    result_.longest_leaderless = std::max(result_.longest_leaderless, without);
    if (without > bound_) {
      Fail(absl::StrCat("shard ", s, " has had no leader that can commit for ",
                        absl::FormatDuration(without), " while voters {", absl::StrJoin(group, ","),
                        "} and etcd could reach each other (bound ", absl::FormatDuration(bound_),
                        ")"));
    }
  }
}

void Simulation::Dispatch(const Event& e) {
  switch (e.kind) {
    case EventKind::kDeliver: {
      if (!nodes_[e.node].up) return;
      if (!e.message.waited_for_disk && !Reachable(e.message.from, e.message.to)) return;
      if (e.message.kind == Kind::kAppend && nodes_[e.node].slow_disk &&
          !e.message.waited_for_disk && !o_.follower_answers_after_sync) {
        // Taken and answered at once; durable once the sync is done.
        Message now = e.message;
        now.unsynced = true;
        OnMessage(now);
        return;
      }
      if (e.message.kind == Kind::kAppend && nodes_[e.node].slow_disk &&
          !e.message.waited_for_disk) {
        // Handled, and answered, once the sync is done.
        Event later = e;
        later.at = now_ + DiskDelay();
        later.message.waited_for_disk = true;
        Schedule(std::move(later));
        return;
      }
      OnMessage(e.message);
      return;
    }
    case EventKind::kPersist:
      if (nodes_[e.node].up && nodes_[e.node].incarnation == e.tag) OnPersist(e);
      return;
    case EventKind::kTick: {
      if (!nodes_[e.node].up || nodes_[e.node].incarnation != e.tag) return;
      OnTick(e.node);
      Event next = e;
      next.at = now_ + tick_;
      Schedule(std::move(next));
      return;
    }
    case EventKind::kTimer:
      if (nodes_[e.node].up) OnTimer(e.node, e.shard, e.tag);
      return;
    default:
      return;
  }
}

SimulationResult Simulation::Run() {
  const uint32_t rf = std::min(o_.replication_factor, o_.nodes);
  nodes_.resize(o_.nodes);
  etcd_.resize(o_.shards);
  committed_.resize(o_.shards);
  leaders_.resize(o_.shards);
  leaderless_since_.assign(o_.shards, kNever);
  handed_to_.assign(o_.shards, {-1, Time()});
  group_.resize(o_.shards);
  for (Node& n : nodes_) n.shards.resize(o_.shards);
  // Placement as a new cluster writes it: nodes s, s+1, ... (mod n).
  for (uint32_t s = 0; s < o_.shards; ++s) {
    etcd_[s].voters = core::InitialVoters(s, o_.nodes, rf);
    etcd_[s].placement_revision = ++revision_;
  }
  for (uint32_t node = 0; node < o_.nodes; ++node) {
    Event tick;
    tick.kind = EventKind::kTick;
    tick.at = Between(absl::ZeroDuration(), tick_);
    tick.node = node;
    Schedule(std::move(tick));
  }
  for (uint32_t s = 0; s < o_.shards; ++s) {
    Event write;
    write.kind = EventKind::kWrite;
    write.at = Between(absl::ZeroDuration(), o_.write_every * 2);
    write.shard = s;
    Schedule(std::move(write));
  }
  const bool faults = o_.crashes || o_.pauses || o_.partitions || o_.etcd_isolation ||
                      o_.slow_nodes || o_.early_revocations || o_.slow_disks;
  if (faults) {
    Event fault;
    fault.kind = EventKind::kFault;
    fault.at = Between(absl::ZeroDuration(), o_.fault_every * 2);
    Schedule(std::move(fault));
  }
  if (o_.moves) {
    Event move;
    move.kind = EventKind::kMove;
    move.at = Between(absl::ZeroDuration(), o_.move_every * 2);
    Schedule(std::move(move));
  }
  for (size_t i = 0; i < o_.script.size(); ++i) {
    Event fault;
    fault.kind = EventKind::kScripted;
    fault.at = o_.script[i].at;
    fault.tag = i;
    Schedule(std::move(fault));
  }
  Time last_liveness_check = -kNever;
  while (!queue_.empty() && result_.ok) {
    Event e = queue_.top();
    queue_.pop();
    if (e.at > o_.duration) break;
    now_ = e.at;
    ExpireLeases();
    const bool for_node = e.kind == EventKind::kDeliver || e.kind == EventKind::kTick ||
                          e.kind == EventKind::kTimer || e.kind == EventKind::kPersist;
    if (for_node && nodes_[e.node].paused) {
      held_[e.node].push_back(std::move(e));
      continue;
    }
    switch (e.kind) {
      case EventKind::kWrite: {
        OnWrite(e.shard);
        Event next = e;
        next.at = now_ + Between(absl::ZeroDuration(), o_.write_every * 2);
        Schedule(std::move(next));
        break;
      }
      case EventKind::kFault: {
        // Faults stop for the last third, so that the end of every run
        // shows the cluster recover.
        if (now_ < o_.duration * 2 / 3) InjectFault();
        Event next = e;
        next.at = now_ + Between(absl::ZeroDuration(), o_.fault_every * 2);
        Schedule(std::move(next));
        break;
      }
      case EventKind::kScripted:
        InjectScripted(o_.script[e.tag]);
        break;
      case EventKind::kHeal:
        e.heal();
        break;
      case EventKind::kMove: {
        StartMove();
        Event next = e;
        next.at = now_ + Between(absl::ZeroDuration(), o_.move_every * 2);
        Schedule(std::move(next));
        break;
      }
      default:
        Dispatch(e);
    }
    for (uint32_t s : touched_) CheckShard(s);
    touched_.clear();
    if (now_ >= o_.check_liveness_from && now_ - last_liveness_check >= absl::Milliseconds(50)) {
      last_liveness_check = now_;
      CheckLiveness();
    }
  }
  for (uint32_t s = 0; s < etcd_.size(); ++s) {
    const EtcdShard& k = etcd_[s];
    if (!k.voters.empty() && k.leader == static_cast<int32_t>(k.voters.front())) {
      ++result_.led_by_first_voter;
    }
  }
  if (tracing_) result_.trace = absl::StrJoin(trace_, "\n");
  return result_;
}

}  // namespace sim

SimulationResult RunSimulation(const SimulationOptions& options) {
  SimulationResult result = sim::Simulation(options, options.trace).Run();
  // A failed run is played again from its seed, this time with the trace.
  if (!result.ok && !options.trace) result = sim::Simulation(options, /*trace=*/true).Run();
  return result;
}

}  // namespace dedup::tests::replication
