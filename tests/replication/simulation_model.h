#ifndef DEDUP_TESTS_REPLICATION_SIMULATION_MODEL_H_
#define DEDUP_TESTS_REPLICATION_SIMULATION_MODEL_H_

// The simulation's world (cluster_simulation.h): its messages, etcd's view
// of each shard, the nodes and their replicas, the events of the schedule,
// and the Simulation that plays them. Its member functions live by topic:
// simulated_node.cc (the write path, messages, moves), simulated_elections.cc
// (who stands and when, ballots), cluster_simulation.cc (faults, invariants,
// the run itself). Only those files include this header.

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/replication/election.h"
#include "server/replication/placement.h"
#include "server/replication/quorum.h"
#include "server/replication/timing.h"
#include "tests/replication/cluster_simulation.h"

namespace dedup::tests::replication::sim {

using core::Ballot;
using core::MoveFacts;
using core::MoveStep;
using core::Position;
// Simulated time, since the run began.
using Time = absl::Duration;

constexpr Time kNever = absl::InfiniteDuration();
constexpr size_t kShipEntries = 64;
constexpr size_t kTraceLines = 400;

inline bool Holds(const std::vector<uint32_t>& nodes, uint32_t node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

using core::PeerTimeout;
using core::Tick;
using core::TrustedLease;

enum class Kind {
  kAppend,
  kAppendReply,
  kPromise,
  kPromiseReply,
  kReadLog,
  kReadLogReply,
  kHandOffNotice  // From a leader that handed the shard over at `epoch`.
};
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
  // Appends and their replies: when the leader sent the append.
  Time sent_at = Time();
  // Promises: the epoch of the leader that handed the shard to the
  // candidate (etcd's handoff key); 0: none.
  uint64_t handoff_epoch = 0;
  // Appends to a node with a slow disk: delivered once, then handled
  // after the disk's delay.
  bool waited_for_disk = false;
  // An append taken before its sync, which follows (the option
  // follower_answers_after_sync off): durable only once that is done.
  bool unsynced = false;
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
  uint64_t handoff_epoch = 0;
};

struct Peer {
  uint64_t next = 1;
  uint64_t match = 0;
  Time last_heard = -kNever;
  Time sent_at = -kNever;  // Of the append in flight; -kNever: none.
  // When the newest append this peer acknowledged was sent.
  Time acked_sent_at = -kNever;
  // Since when it has answered without a gap of two ticks; kNever: not.
  Time live_since = kNever;
};

enum class Phase { kNone, kReading, kPromises, kCatchUp };

// One node's replica of one shard: the log and promise persist across a
// crash, the rest does not.
struct Replica {
  std::vector<uint64_t> log;  // log[i]: the epoch of entry i + 1.
  // Entries 1..durable are on disk. A leader's own entries get there
  // after its disk's delay (and count towards the commit only then); a
  // crash loses the rest. A follower's appends are on disk when handled.
  uint64_t durable = 0;
  uint64_t promised = 0;

  bool holds = false;
  std::vector<uint32_t> voters, learners;
  int64_t placement_revision = 0;
  int32_t leader = -1;
  uint64_t epoch = 0;
  int32_t handoff = -1;
  uint64_t handoff_epoch = 0;
  // The leader of the last append this replica accepted, its epoch, and
  // when (core::Stickiness). After a restart: unknown (-2), at most the
  // promised epoch, at the restart.
  int32_t heard_leader = -1;
  uint64_t heard_epoch = 0;
  Time heard_at = -kNever;
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
  bool slow_disk = false;  // Every sync takes 50-300 ms.
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

enum class EventKind {
  kDeliver,
  kTick,
  kTimer,
  kPersist,  // An entry reaches the disk (a leader's own, or a follower's).
  kWrite,
  kFault,
  kScripted,
  kHeal,
  kMove
};

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
inline Message Request(Kind kind, uint32_t from, uint32_t to, uint32_t s, uint64_t epoch) {
  Message m;
  m.kind = kind;
  m.from = from;
  m.to = to;
  m.shard = s;
  m.epoch = epoch;
  return m;
}

// An answer to `m`, from its addressee, for the same shard and epoch.
inline Message ReplyTo(const Message& m, Kind kind) {
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
  // Whether a majority of the shard's voters acknowledged an append this
  // leader sent within core::ReadLease.
  bool ReadLeaseValid(uint32_t node, uint32_t s) const;
  // Whether the node may answer reads (and decide writes) for the shard.
  bool MayAnswer(uint32_t node, uint32_t s) const {
    return nodes_[node].shards[s].serving && LeaseValid(node) &&
           (!o_.read_lease || ReadLeaseValid(node, s));
  }
  // core::Sticky for the replica, when the options hold a read lease.
  bool Sticky(const Replica& r, uint32_t candidate, uint64_t handoff_epoch) const;

  // A node's driver.
  // Appends an entry of the node's own epoch as the shard's leader.
  void AppendOwn(uint32_t node, uint32_t s);
  void OnPersist(const Event& e);
  Time DiskDelay() { return Between(absl::Milliseconds(50), absl::Milliseconds(300)); }
  void OnTick(uint32_t node);
  void RenewLease(uint32_t node);
  void ReadLeadership(uint32_t node);
  void ApplyPlacement(uint32_t node, uint32_t s, const EtcdShard& view);
  void StepDown(uint32_t node, uint32_t s, const std::string& why);
  // True when etcd's leader key was the node's at `epoch`, and is gone now.
  bool ReleaseLeaderKey(uint32_t node, uint32_t s, uint64_t epoch, int32_t handoff = -1);
  // Steps down from the shard and hands it to `to` through etcd, telling
  // `to` directly when the options say so.
  void HandOffTo(uint32_t node, uint32_t s, uint32_t to, const std::string& why);
  void OnHandOffNotice(const Message& m);
  void Ship(uint32_t node, uint32_t s, uint32_t peer, bool heartbeat);
  void ShipAll(uint32_t node, uint32_t s, bool heartbeat);
  void AdvanceCommit(uint32_t node, uint32_t s);
  void CheckQuorum(uint32_t node, uint32_t s);
  void AdvanceMove(uint32_t node, uint32_t s);
  // Hands the shard back to its first voter (core::ShouldHandBack).
  void HandBack(uint32_t node, uint32_t s);
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
  // etcd ends the node's lease now (the early-revocation fault).
  void RevokeLease(uint32_t node);
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
  // Per shard: the target of the last hand-off and when, until it wins
  // the shard or another node does.
  std::vector<std::pair<int32_t, Time>> handed_to_;
  std::vector<std::vector<uint32_t>> group_;  // Per shard: that majority.
  std::set<uint32_t> touched_;
  SimulationResult result_;
  std::deque<std::string> trace_;
};

}  // namespace dedup::tests::replication::sim

#endif  // DEDUP_TESTS_REPLICATION_SIMULATION_MODEL_H_
