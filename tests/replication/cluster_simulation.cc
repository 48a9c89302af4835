#include "tests/replication/cluster_simulation.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/replication/quorum.h"
#include "server/replication/timing.h"

namespace dedup::tests::replication {
namespace {

using core::Ballot;
using core::MoveFacts;
using core::MoveStep;
using core::Position;
// Simulated time, since the run began.
using Time = absl::Duration;

constexpr Time kNever = absl::InfiniteDuration();
constexpr size_t kShipEntries = 64;
constexpr size_t kTraceLines = 400;

bool Holds(const std::vector<uint32_t>& nodes, uint32_t node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

using core::PeerTimeout;
using core::Tick;
using core::TrustedLease;

enum class Kind { kAppend, kAppendReply, kPromise, kPromiseReply, kReadLog, kReadLogReply };
enum class AppendResult { kAppended, kMismatch, kFenced, kNotReplica };

struct Message {
  Kind kind = Kind::kAppend;
  uint32_t from = 0, to = 0, shard = 0;
  uint64_t epoch = 0;  // The sender's (leader's or candidate's) epoch.
  // Appends: the entry before and the epochs of the entries after it.
  Position prev;
  std::vector<uint64_t> entries;
  uint64_t commit = 0;
  // Replies.
  AppendResult result = AppendResult::kAppended;
  Position last;
  uint64_t promised = 0;
  bool granted = false;
};

// etcd's keys for one shard (docs/replication.md, docs/elastic.md).
struct EtcdShard {
  uint64_t epoch = 0;  // shards/<s>
  int64_t epoch_revision = 0;
  int32_t leader = -1;  // leader/<s>, on `leader_lease`
  uint64_t leader_epoch = 0;
  int64_t leader_lease = 0;
  std::vector<uint32_t> voters, learners;  // placement/<s>
  int64_t placement_revision = 0;
  int32_t move_from = -1, move_to = -1;  // moves/<s>
  MoveFacts::State move_state = MoveFacts::State::kAdding;
  int64_t move_revision = 0;
  int32_t handoff = -1;  // handoff/<s>
};

struct Peer {
  uint64_t next = 1;
  uint64_t match = 0;
  Time last_heard = -kNever;
  Time sent_at = -kNever;  // Of the append in flight; -kNever: none.
};

enum class Phase { kNone, kReading, kPromises, kCatchUp };

// One node's replica of one shard: the log and promise persist across a
// crash, the rest does not.
struct Replica {
  std::vector<uint64_t> log;  // log[i]: the epoch of entry i + 1.
  uint64_t promised = 0;

  bool holds = false;
  std::vector<uint32_t> voters, learners;
  int64_t placement_revision = 0;
  int32_t leader = -1;
  uint64_t epoch = 0;
  int32_t handoff = -1;
  Time leaderless_since = Time();
  Time next_election = -kNever;
  bool leading = false, serving = false;
  uint64_t lead_epoch = 0, epoch_start = 0, commit = 0;
  Time won_at = -kNever;
  std::map<uint32_t, Peer> peers;
  int32_t move_from = -1, move_to = -1;
  MoveFacts::State move_state = MoveFacts::State::kAdding;
  int64_t move_revision = 0;
  Time target_gone_since = kNever;
  // An election under way.
  Phase phase = Phase::kNone;
  uint64_t round = 0;        // Tells one attempt's timers and answers from another's.
  uint64_t start_round = 0;  // Of the won epoch's first entry.
  std::optional<Ballot> ballot;
  uint64_t elect_epoch = 0;
  int64_t elect_epoch_revision = 0, elect_placement_revision = 0;
  std::vector<uint32_t> elect_voters, elect_learners;
  bool holds_thread = false;  // Counted in the node's running elections.

  Position Last() const { return {log.empty() ? 0 : log.back(), log.size()}; }
  uint64_t EpochAt(uint64_t seq) const { return seq == 0 ? 0 : log[seq - 1]; }
};

struct Node {
  bool up = true;
  bool paused = false;
  bool etcd_cut = false;
  bool slow = false;
  int64_t lease = 0;
  Time lease_valid_until = -kNever;
  Time last_renewal = -kNever;
  uint32_t elections_running = 0;
  uint32_t scan_cursor = 0;  // The serial election thread's place.
  uint64_t incarnation = 0;  // Ticks of an earlier life are ignored.
  // When each peer last answered an append of this node's, for any shard.
  std::map<uint32_t, Time> heard;
  std::vector<Replica> shards;
};

enum class EventKind { kDeliver, kTick, kTimer, kWrite, kFault, kScripted, kHeal, kMove };

struct Event {
  Time at;
  uint64_t order = 0;
  EventKind kind = EventKind::kTick;
  uint32_t node = 0, shard = 0;
  uint64_t tag = 0;  // Tick: incarnation; timer: election round.
  Message message;
  std::function<void()> heal;
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : order > o.order; }
};

// A request of `kind` from `from` to `to` about shard `s` at `epoch`.
Message Request(Kind kind, uint32_t from, uint32_t to, uint32_t s, uint64_t epoch) {
  Message m;
  m.kind = kind;
  m.from = from;
  m.to = to;
  m.shard = s;
  m.epoch = epoch;
  return m;
}

// An answer to `m`, from its addressee, for the same shard and epoch.
Message ReplyTo(const Message& m, Kind kind) {
  return Request(kind, m.to, m.from, m.shard, m.epoch);
}

class Simulation {
 public:
  explicit Simulation(const SimulationOptions& options, bool trace)
      : o_(options), tracing_(trace), random_(options.seed), tick_(Tick(options.lease_ttl)) {
    // The old leader's lease, etcd read again, the voters' turns, and two
    // election rounds lost to a silent voter and the back-off after each.
    const Time round =
        PeerTimeout(o_.lease_ttl) + absl::Milliseconds(100) + tick_ + o_.lease_ttl / 4;
    bound_ = o_.leader_bound > absl::ZeroDuration() ? o_.leader_bound
                                                    : o_.lease_ttl + tick_ * 10 + round * 2;
  }

  SimulationResult Run();

 private:
  // Plumbing.
  void Schedule(Event e) {
    e.order = ++order_;
    queue_.push(std::move(e));
  }
  double Uniform() { return std::uniform_real_distribution<double>(0, 1)(random_); }
  Time Between(Time low, Time high) { return low + (high - low) * Uniform(); }
  void Trace(const std::string& line) {
    if (!tracing_) return;
    trace_.push_back(absl::StrCat(absl::FormatDuration(now_), " ", line));
    if (trace_.size() > kTraceLines) trace_.pop_front();
  }
  void Fail(const std::string& what) {
    if (!result_.ok) return;
    result_.ok = false;
    result_.violation =
        absl::StrCat("seed ", o_.seed, " at ", absl::FormatDuration(now_), ": ", what);
    Trace(absl::StrCat("VIOLATION ", what));
  }
  bool Reachable(uint32_t from, uint32_t to) const { return !cut_.count({from, to}); }
  bool Runs(uint32_t node) const { return nodes_[node].up && !nodes_[node].paused; }
  void Send(Message m);
  void ScheduleTimer(uint32_t node, uint32_t s, Time at, uint64_t round) {
    Event e;
    e.kind = EventKind::kTimer;
    e.at = at;
    e.node = node;
    e.shard = s;
    e.tag = round;
    Schedule(std::move(e));
  }
  void Dispatch(const Event& e);

  // etcd.
  bool EtcdReachable(uint32_t node) const { return Runs(node) && !nodes_[node].etcd_cut; }
  void ExpireLeases();
  bool LeaseValid(uint32_t node) const { return now_ < nodes_[node].lease_valid_until; }

  // A node's driver.
  void OnTick(uint32_t node);
  void RenewLease(uint32_t node);
  void ReadLeadership(uint32_t node);
  void ApplyPlacement(uint32_t node, uint32_t s, const EtcdShard& view);
  void StepDown(uint32_t node, uint32_t s, const std::string& why);
  void ReleaseLeaderKey(uint32_t node, uint32_t s, uint64_t epoch, int32_t handoff = -1);
  void Ship(uint32_t node, uint32_t s, uint32_t peer, bool heartbeat);
  void ShipAll(uint32_t node, uint32_t s, bool heartbeat);
  void AdvanceCommit(uint32_t node, uint32_t s);
  void CheckQuorum(uint32_t node, uint32_t s);
  void AdvanceMove(uint32_t node, uint32_t s);
  void StartElections(uint32_t node);
  bool MayStand(uint32_t node, uint32_t s) const;
  void BeginElection(uint32_t node, uint32_t s);
  void AskPromises(uint32_t node, uint32_t s);
  void OnBallot(uint32_t node, uint32_t s);
  void FinishElection(uint32_t node, uint32_t s, bool won_ballot);
  void EndElection(uint32_t node, uint32_t s, bool lost);
  void OnTimer(uint32_t node, uint32_t s, uint64_t round);
  void OnMessage(const Message& m);
  void OnAppend(const Message& m);
  void OnAppendReply(const Message& m);
  void OnPromise(const Message& m);
  void OnPromiseReply(const Message& m);
  void OnWrite(uint32_t s);

  // Faults and moves.
  void InjectFault();
  void InjectScripted(const ScriptedFault& fault);
  void Pause(uint32_t node, Time lasting);
  void StartMove();
  void Crash(uint32_t node);
  void Restart(uint32_t node);

  // Invariants.
  void RecordCommit(uint32_t node, uint32_t s);
  void CheckShard(uint32_t s);
  void CheckLiveness();

  const SimulationOptions o_;
  const bool tracing_;
  std::mt19937_64 random_;
  const Time tick_;
  Time bound_;
  Time now_;
  uint64_t order_ = 0;
  uint64_t rounds_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::vector<Node> nodes_;
  std::vector<EtcdShard> etcd_;
  std::map<int64_t, Time> leases_;  // id -> when etcd ends it
  int64_t revision_ = 1;
  int64_t next_lease_ = 1;
  std::set<std::pair<uint32_t, uint32_t>> cut_;  // (from, to) links that drop
  // Paused nodes' events, delivered when they resume.
  std::map<uint32_t, std::vector<Event>> held_;
  // What the invariants remember.
  std::vector<std::vector<uint64_t>> committed_;       // Per shard: epochs of committed entries.
  std::vector<std::map<uint64_t, uint32_t>> leaders_;  // Per shard: epoch -> node.
  std::vector<Time> leaderless_since_;                 // Per shard, while a majority could lead.
  std::vector<std::vector<uint32_t>> group_;           // Per shard: that majority.
  std::set<uint32_t> touched_;
  SimulationResult result_;
  std::deque<std::string> trace_;
};

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

void Simulation::ReleaseLeaderKey(uint32_t node, uint32_t s, uint64_t epoch, int32_t handoff) {
  if (!EtcdReachable(node)) return;
  EtcdShard& k = etcd_[s];
  if (k.leader != static_cast<int32_t>(node) || k.leader_epoch != epoch) return;
  k.leader = -1;
  if (handoff >= 0) k.handoff = handoff;
  ++revision_;
}

void Simulation::ApplyPlacement(uint32_t node, uint32_t s, const EtcdShard& view) {
  Replica& r = nodes_[node].shards[s];
  const bool holds = Holds(view.voters, node) || Holds(view.learners, node);
  const bool had_data = !r.log.empty();
  if (holds && !r.holds && r.placement_revision != 0 && had_data) r.log.clear();
  r.voters = view.voters;
  r.learners = view.learners;
  r.placement_revision = view.placement_revision;
  if (!holds && r.holds) {
    StepDown(node, s, "no longer holds the shard");
    r.log.clear();  // Moved away: the copy goes; the promise stays.
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

void Simulation::ReadLeadership(uint32_t node) {
  if (!EtcdReachable(node)) return;
  Node& n = nodes_[node];
  std::vector<uint32_t> stale;
  for (uint32_t s = 0; s < etcd_.size(); ++s) {
    const EtcdShard& view = etcd_[s];
    Replica& r = n.shards[s];
    r.handoff = view.handoff;
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
  held[node] = r.log.size();
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
    const uint64_t epoch = r.lead_epoch;
    StepDown(node, s, "hands the shard to the move's target");
    // Until it reads the handoff key back, it would contend at once.
    r.handoff = static_cast<int32_t>(to);
    r.next_election = std::max(r.next_election, now_ + o_.lease_ttl / 2);
    ReleaseLeaderKey(node, s, epoch, static_cast<int32_t>(to));
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

bool Simulation::MayStand(uint32_t node, uint32_t s) const {
  const Replica& r = nodes_[node].shards[s];
  if (!r.holds || r.leader >= 0 || r.leading || r.phase != Phase::kNone || !Holds(r.voters, node)) {
    return false;
  }
  const auto rank = std::find(r.voters.begin(), r.voters.end(), node) - r.voters.begin();
  Time wait = core::ElectionWait(rank, o_.lease_ttl);
  if (r.handoff == static_cast<int32_t>(node)) {
    wait = absl::ZeroDuration();
  } else if (r.handoff >= 0) {
    wait += o_.lease_ttl / 2;
  }
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
  if (!EtcdReachable(node) || k.leader >= 0 || !Holds(k.voters, node)) {
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
    Send(Request(Kind::kPromise, node, voter, s, r.elect_epoch));
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
  // At most one leader per epoch, and epochs (hence tokens) only grow.
  auto& leaders = leaders_[s];
  if (!leaders.empty() && leaders.rbegin()->first >= epoch) {
    Fail(absl::StrCat("shard ", s, ": node ", node, " wins epoch ", epoch, " after epoch ",
                      leaders.rbegin()->first, " was won"));
  }
  leaders[epoch] = node;
  r.phase = Phase::kNone;
  r.ballot.reset();
  r.won_at = now_;
  r.leading = true;
  r.serving = false;
  r.lead_epoch = r.epoch = epoch;
  r.leader = static_cast<int32_t>(node);
  if (k.placement_revision > r.placement_revision) ApplyPlacement(node, s, k);
  r.peers.clear();
  r.log.push_back(epoch);  // The first entry of the epoch.
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
    }
    r.log.push_back(m.entries[i]);
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
  p.last_heard = now_;
  const uint64_t held = m.prev.seq + m.entries.size();
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
  const bool leads = r.leading && LeaseValid(m.to);
  if (r.holds && Holds(r.voters, m.to) && m.epoch > r.promised && !leads) {
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
      FinishElection(m.to, m.shard, true);
      return;
  }
}

void Simulation::OnWrite(uint32_t s) {
  for (uint32_t node = 0; node < nodes_.size(); ++node) {
    Replica& r = nodes_[node].shards[s];
    if (!Runs(node) || !r.serving || !LeaseValid(node)) continue;
    r.log.push_back(r.lead_epoch);
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
  }
  StartElections(node);
}

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
    kept[s].promised = fresh.shards[s].promised;
    kept[s].leaderless_since = now_;
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

void Simulation::InjectFault() {
  std::vector<int> kinds;
  if (o_.crashes) kinds.push_back(0);
  if (o_.pauses) kinds.push_back(1);
  if (o_.partitions) kinds.push_back(2);
  if (o_.etcd_isolation) kinds.push_back(3);
  if (o_.slow_nodes) kinds.push_back(4);
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
    if (r.log.size() >= seq && r.log[seq - 1] == committed[seq - 1]) held[node] = seq;
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
      if (nodes_[node].shards[s].serving && LeaseValid(node)) serving.push_back(node);
    }
    if (serving.size() > 1) {
      Fail(absl::StrCat("shard ", s, " is served by nodes {", absl::StrJoin(serving, ","),
                        "} at once"));
    }
    bool led = false;
    for (uint32_t node = 0; node < nodes_.size() && !led; ++node) {
      const Replica& r = nodes_[node].shards[s];
      if (!Runs(node) || !r.serving || !LeaseValid(node)) continue;
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
    case EventKind::kDeliver:
      if (!nodes_[e.node].up || !Reachable(e.message.from, e.message.to)) return;
      OnMessage(e.message);
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
  group_.resize(o_.shards);
  for (Node& n : nodes_) n.shards.resize(o_.shards);
  // Placement as a new cluster writes it: nodes s, s+1, ... (mod n).
  for (uint32_t s = 0; s < o_.shards; ++s) {
    for (uint32_t i = 0; i < rf; ++i) etcd_[s].voters.push_back((s + i) % o_.nodes);
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
  const bool faults =
      o_.crashes || o_.pauses || o_.partitions || o_.etcd_isolation || o_.slow_nodes;
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
    const bool for_node =
        e.kind == EventKind::kDeliver || e.kind == EventKind::kTick || e.kind == EventKind::kTimer;
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
  if (tracing_) result_.trace = absl::StrJoin(trace_, "\n");
  return result_;
}

}  // namespace

SimulationResult RunSimulation(const SimulationOptions& options) {
  SimulationResult result = Simulation(options, options.trace).Run();
  // A failed run is played again from its seed, this time with the trace.
  if (!result.ok && !options.trace) result = Simulation(options, /*trace=*/true).Run();
  return result;
}

}  // namespace dedup::tests::replication
