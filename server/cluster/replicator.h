#ifndef DEDUP_SERVER_CLUSTER_REPLICATOR_H_
#define DEDUP_SERVER_CLUSTER_REPLICATOR_H_

// The replica sets of docs/replication.md, on one node.
//
// Every shard has `replication_factor` replicas, placed by etcd
// (docs/elastic.md): nodes s, s+1, ... (mod n) of the first cluster.nodes
// when the cluster is created, and wherever shard moves take them since.
// One of them leads the shard and serves its calls; the others follow. The store decides every call
// exactly as a single node does; this class turns the writes it decided into the next entries of
// the shard's log (storage/replication_log.h), ships them to the
// followers, and answers once a majority holds them (§2).
//
// Leadership lives in etcd, under /dedup/<cluster>/:
//   shards/<s>   the shard's epoch, raised by one at every election;
//   leader/<s>   "<node> <epoch>", attached to the leader's etcd lease;
//   handoff/<s>  the follower a leader that stops hands the shard to;
//   members/<i>  written once node i has joined with its data;
//   learner/<i>/<s>  node i re-seeds shard s and may not vote for it yet;
//   placement/<s>  "voters=a,b,c learners=d": who holds the shard;
//   moves/<s>    "from=a to=d state=adding|promoted": a move under way,
//                driven by the shard's leader (docs/elastic.md §3);
//   draining/<i> node i is being emptied: no move targets it;
//   shard-count  the cluster's shard count, which every node must have.
// Every change of placement/<s> is an etcd transaction on its revision.
// A shard whose leader/<s> key is gone (its lease ended) is taken over by a
// replica that gathers promises for epoch+1 from a majority, adopts the
// most advanced log among them, and wins an etcd transaction on shards/<s>
// (§3). A promise fences every older leader: it can no longer gather a
// majority of acknowledgements. Reads are answered only while the leader's
// own reckoning of its lease, counted on CLOCK_BOOTTIME from the last
// keep-alive etcd answered, has not run out: it runs out before etcd can
// end the lease anywhere else.
//
// Fencing tokens: a leader of epoch e hands out e * 2^40 + 1, + 2, ...:
// above every token of any earlier epoch, so a key's tokens grow across
// any sequence of failovers without a ceiling to replicate.
//
// Thread-safe. Threads: one keeps the etcd lease, reads the leadership
// and placement keys and advances moves; one finds the shards due for an
// election and up to 64 run them; one per peer (and one per learner or
// re-seeded follower) ships the log while this node leads the shard.
//
// The protocol's decisions are pure functions in server/replication/;
// this class does the I/O around them. Its definitions are split by
// concern: replicator.cc (joining, the lease, the coordinating loop,
// reports), replicator_leadership.cc (elections, stepping down),
// replicator_handoff.cc (planned hand-offs), replicator_shipping.cc
// (commits, shipping, trimming, re-seeding), replicator_follower.cc (the
// Replication service's calls) and replicator_placement.cc (holding
// shards, moves).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/replication/v1/replication.grpc.pb.h"
#include "dedup/v1/dedup.pb.h"
#include "grpcpp/security/credentials.h"
#include "server/cluster/etcd_client.h"
#include "storage/replication_log.h"
#include "storage/shard_replicator.h"
#include "storage/store.h"

namespace dedup::server::cluster {

// The shard count of a new replicated cluster's data directories when none
// is asked for: room for hundreds of nodes at a few MiB per node
// (docs/elastic.md §1). A single node keeps storage::kDefaultShards.
inline constexpr uint32_t kNewClusterShards = 1024;

// The shard count a new data directory of the cluster under `etcd_prefix`
// should have: the one the cluster recorded in etcd (shard-count), or
// kNewClusterShards while it has none.
absl::StatusOr<uint32_t> ShardsForNewDirectory(EtcdClient* etcd, absl::string_view etcd_prefix);

struct ReplicatorOptions {
  // Addresses of every node, as peers and clients reach them.
  std::vector<std::string> nodes;
  uint32_t self = 0;
  uint32_t replication_factor = 3;
  // "/dedup/<cluster>/".
  std::string etcd_prefix;
  absl::Duration lease_ttl = absl::Seconds(3);
  // How this node calls its peers.
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
  // What a leader sends the target of a move, at most.
  uint64_t move_bytes_per_second = 32ull << 20;
  // The largest message a peer takes or sends: the smaller of
  // limits.max_receive_message_bytes and limits.max_send_message_bytes,
  // which every node of a cluster is expected to share. A call carries at
  // most half of it in entries or records (ShipBytes), leaving the rest
  // for framing and for many shards' heartbeats.
  size_t peer_message_bytes = 4 << 20;
  // This node's zone (cluster.zone), written to etcd as zones/<self>; ""
  // none. A new cluster places shards over the zones of every node
  // (core::InitialVoters).
  std::string zone;
};

// Bytes of entries (or records) one replication call carries at most, for
// peers that take messages of up to `peer_message_bytes`: half of that, at
// most 1 MiB, at least 16 KiB.
size_t ShipBytes(size_t peer_message_bytes);

// What the node knows of one shard, for Topology and the metrics.
struct ShardView {
  uint32_t shard = 0;
  int32_t leader = -1;
  uint64_t epoch = 0;
  bool replica = false;  // This node holds the shard.
  bool leading = false;  // This node leads it and serves it.
  bool learner = false;  // This node re-seeds it and does not vote.
  storage::LogPosition last;
  storage::LogPosition applied;
  uint64_t commit_seq = 0;
  absl::Duration without_leader;  // So far, while it has none.
  struct Follower {
    uint32_t node = 0;
    uint64_t match_seq = 0;
    uint64_t applied_seq = 0;
    bool live = false;
  };
  std::vector<Follower> followers;  // When leading.
  std::vector<uint32_t> voters;
  std::vector<uint32_t> learners;
  // A move under way: from, to and state ("adding", "promoted"); when
  // leading, bytes sent to the target so far and how far behind it is.
  int32_t move_from = -1;
  int32_t move_to = -1;
  std::string move_state;
  uint64_t move_copied_bytes = 0;
  uint64_t move_behind = 0;
};

// What this node, as a leader, sent one follower since start.
struct ShipCounters {
  // Replication calls that carried appends (a Ship of many shards, or an
  // Append of one), heartbeats included.
  uint64_t calls = 0;
  uint64_t entries = 0;  // Log entries in them.
  // What the calls' appends came to on the wire (protobuf encoding), and
  // the logged writes alone within them (the entries' batches).
  uint64_t bytes = 0;
  uint64_t entry_bytes = 0;
};

// Counters since start, for the metrics.
struct ReplicatorCounters {
  uint64_t leader_changes = 0;               // Shards this node took over.
  uint64_t fenced_appends = 0;               // Appends refused for a lower epoch.
  uint64_t elections_lost = 0;               // Attempts without a majority or etcd.
  uint64_t handoff_notices_sent = 0;         // Shards handed to a named follower, told directly.
  uint64_t handoff_notices_stood = 0;        // Notices this node stood on at once.
  std::map<uint32_t, ShipCounters> shipped;  // By follower.
};

class Replicator : public storage::ShardReplicator {
 public:
  // Joins the cluster: registers with etcd (a node whose data directory
  // was just created but that etcd knows re-seeds every shard first) and
  // starts the threads. `etcd`, `log` and `store` must outlive it.
  static absl::StatusOr<std::unique_ptr<Replicator>> Start(const ReplicatorOptions& options,
                                                           EtcdClient* etcd,
                                                           storage::ReplicationLog* log,
                                                           storage::Store* store);
  ~Replicator() override;

  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Planned transfer (§6): stops serving every shard this node leads, waits
  // (up to `timeout` in all) for a follower to hold its whole log, and
  // hands the shard to it through etcd.
  void HandOff(absl::Duration timeout);
  // Stops the threads and revokes the etcd lease; the node then leads
  // nothing. Idempotent.
  void Stop();

  // storage::ShardReplicator.
  absl::Status CheckLeading(uint32_t shard) override;
  absl::StatusOr<uint64_t> NextToken(uint32_t shard) override;
  void CommitAsync(std::vector<storage::ShardWrite> writes, CommitDone done) override;

  // The Replication service, as a follower and a voter.
  // Unless `sync` is false, when the caller syncs the log before it
  // answers (HandleShip), the entries are persisted per the durability.
  replication::v1::AppendResponse HandleAppend(const replication::v1::AppendRequest& request,
                                               bool sync = true);
  // Several shards' appends from one leader, each as HandleAppend, and
  // one sync of the log for all of them. INTERNAL (and no answer) when
  // that sync fails.
  absl::StatusOr<replication::v1::ShipResponse> HandleShip(
      const replication::v1::ShipRequest& request);
  // HandleShip without waiting for the sync: the appends are written on
  // this thread and `done` runs with the answer once a sync covers them,
  // on the log-sync thread (fsync durability), or here when nothing needs
  // one. It must not block. For a call that must not wait for a disk.
  using ShipDone = absl::AnyInvocable<void(absl::StatusOr<replication::v1::ShipResponse>) &&>;
  void HandleShipAsync(const replication::v1::ShipRequest& request, ShipDone done);
  replication::v1::PromiseResponse HandlePromise(const replication::v1::PromiseRequest& request);
  absl::StatusOr<replication::v1::ReadLogResponse> HandleReadLog(
      const replication::v1::ReadLogRequest& request);
  replication::v1::RestoreResponse HandleRestore(const replication::v1::RestoreRequest& request);

  // Topology's replicated part: per shard, leader, epoch and, for the
  // shards this node leads, its followers.
  void FillTopology(v1::TopologyResponse* response);

  // Admin (docs/elastic.md): starts moving `shard` from voter `from` to
  // the live node `to`; the shard's leader carries the move out. Refuses
  // with FAILED_PRECONDITION and the reason what is not safe.
  absl::Status MoveShard(uint32_t shard, uint32_t from, uint32_t to);
  // Marks a node draining (no move targets it) or not.
  absl::Status SetDraining(uint32_t node, bool draining);
  std::vector<ShardView> Views();
  ReplicatorCounters Counters() const;

 private:
  struct Peer {
    uint64_t next_seq = 1;
    uint64_t match_seq = 0;
    uint64_t applied_seq = 0;  // As it last answered.
    absl::Time last_heard = absl::InfinitePast();
    // Since when it has answered without a gap; InfiniteFuture: never.
    absl::Time live_since = absl::InfiniteFuture();
    // Bytes sent since it became a peer: a move's progress.
    uint64_t sent_bytes = 0;
    // When the newest append it acknowledged was sent (SteadyNowNs): the
    // read lease (core::ReadLease).
    int64_t acked_sent_ns = std::numeric_limits<int64_t>::min();
  };
  // moves/<s> as read from etcd.
  struct Move {
    int32_t from = -1;
    int32_t to = -1;
    std::string state;
    int64_t revision = 0;
    // When this node first saw the target without a live lease.
    absl::Time target_gone_since = absl::InfiniteFuture();
    // When this node, leading the source, first saw the target unable to
    // stand (a re-seed key of it in etcd).
    absl::Time target_kept_since = absl::InfiniteFuture();
  };
  // One CommitAsync: its outcome, and what is still undecided of it.
  struct CommitCall {
    absl::Mutex mu;
    std::vector<absl::Status> results ABSL_GUARDED_BY(mu);
    size_t undecided ABSL_GUARDED_BY(mu) = 0;
    CommitDone done;
  };
  // A write of this node's, as the leader, appended to its shard's log and
  // waiting for the commit (CompleteCommits decides it).
  struct PendingCommit {
    uint64_t epoch = 0;
    storage::LogEntry entry;  // Applied as written once committed.
    absl::Time deadline;
    std::shared_ptr<CommitCall> call;
    size_t index = 0;  // In the call's writes.
  };
  struct Shard {
    absl::Mutex mu;
    absl::CondVar changed;  // Log, commit or leadership changed.
    uint32_t index = 0;
    // Placement (node indices), from etcd: who votes, who only follows.
    std::vector<uint32_t> voters ABSL_GUARDED_BY(mu);
    std::vector<uint32_t> learners ABSL_GUARDED_BY(mu);
    int64_t placement_revision ABSL_GUARDED_BY(mu) = 0;
    Move move ABSL_GUARDED_BY(mu);
    // Nodes whose copy of the shard is being re-seeded (learner/<node>/<s>
    // in etcd), as last read.
    std::vector<uint32_t> reseeding ABSL_GUARDED_BY(mu);
    // This node holds the shard (a voter or a learner of the placement).
    std::atomic<bool> replica{false};
    // This node holds it without a vote (a move's target catching up).
    bool placed_learner ABSL_GUARDED_BY(mu) = false;
    // Learned from etcd (or from the leader's appends).
    int32_t leader ABSL_GUARDED_BY(mu) = -1;
    uint64_t epoch ABSL_GUARDED_BY(mu) = 0;
    absl::Time leaderless_since ABSL_GUARDED_BY(mu) = absl::Now();
    absl::Time next_election ABSL_GUARDED_BY(mu) = absl::InfinitePast();
    int32_t handoff_to ABSL_GUARDED_BY(mu) = -1;
    // The epoch of the leader that named `handoff_to`.
    uint64_t handoff_epoch ABSL_GUARDED_BY(mu) = 0;
    // When its leader's hand-off notice named this node: a read of etcd
    // that began before then must not undo it (it may predate the
    // hand-off).
    absl::Time told_handoff_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
    // The leader of the last append this replica accepted, its epoch, and
    // when (SteadyNowNs): for core::Stickiness it promises no other
    // candidate, since that leader may answer reads on its
    // acknowledgement. At start-up: unknown (-2), at most the promised
    // epoch, now.
    int32_t heard_leader ABSL_GUARDED_BY(mu) = -1;
    uint64_t heard_epoch ABSL_GUARDED_BY(mu) = 0;
    int64_t heard_ns ABSL_GUARDED_BY(mu) = 0;
    // This node as the leader.
    bool leading ABSL_GUARDED_BY(mu) = false;
    // Between winning the etcd transaction and taking the shard.
    bool electing ABSL_GUARDED_BY(mu) = false;
    // Between stepping down to hand the shard over and the etcd
    // transaction that releases its leader key and names the target: the
    // key still names this node, and is not an earlier run's.
    bool handing_over ABSL_GUARDED_BY(mu) = false;
    bool serving ABSL_GUARDED_BY(mu) = false;
    uint64_t lead_epoch ABSL_GUARDED_BY(mu) = 0;
    // The etcd lease its leader key is attached to: it leads only while
    // that is this node's lease.
    int64_t lead_lease ABSL_GUARDED_BY(mu) = 0;
    absl::Time leading_since ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
    uint64_t epoch_start_seq ABSL_GUARDED_BY(mu) = 0;
    uint64_t commit_seq ABSL_GUARDED_BY(mu) = 0;
    uint64_t tokens ABSL_GUARDED_BY(mu) = 0;
    std::map<uint32_t, Peer> peers ABSL_GUARDED_BY(mu);
    // What every replica holds (leader: computed; follower: as told), and
    // how far this log has been trimmed.
    uint64_t trim_seq ABSL_GUARDED_BY(mu) = 0;
    uint64_t trimmed ABSL_GUARDED_BY(mu) = 0;
    // This node as a follower whose data directory was replaced, or whose
    // log fell behind what the leader keeps: it may not vote.
    bool learner ABSL_GUARDED_BY(mu) = false;
    bool restoring ABSL_GUARDED_BY(mu) = false;
    // The learner holds every entry committed so far; the coordinator
    // clears its etcd key (of this revision) and then lets it vote.
    bool learner_caught_up ABSL_GUARDED_BY(mu) = false;
    int64_t learner_revision ABSL_GUARDED_BY(mu) = 0;
    // When this node last won the shard: etcd reads sent before then may
    // not show its leader key yet.
    absl::Time won_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
    // Peers this shard ships to from a thread of their own (ShipDedicated)
    // rather than in the peer's shared call: a move's target, paced, and
    // a follower being re-seeded.
    std::set<uint32_t> dedicated ABSL_GUARDED_BY(mu);
    // Waiting for, or in, an election of this node's (ElectionWorker).
    bool election_queued ABSL_GUARDED_BY(mu) = false;
    // This node's writes waiting for their commit, by log position.
    std::map<uint64_t, PendingCommit> pending ABSL_GUARDED_BY(mu);
  };
  // One shard's append to one peer, as planned and sent.
  struct Outgoing {
    Shard* shard = nullptr;
    uint64_t epoch = 0;
    storage::LogPosition prev;
    size_t entries = 0;
    size_t bytes = 0;
    size_t entry_bytes = 0;  // Of the entries' batches.
    bool to_learner = false;
    int64_t sent_ns = 0;  // SteadyNowNs when planned, before it went.
    replication::v1::AppendRequest request;
  };
  // One shard's append as a follower takes it (HandleAppend, HandleShip).
  struct FollowerAppend {
    uint32_t shard = 0;
    storage::LogPosition prev;
    std::vector<storage::LogEntry> entries;
    // Committed entries to apply through once the append is answered for;
    // 0: none now.
    uint64_t apply_to = 0;
    replication::v1::AppendResponse response;
  };
  enum class ShipPlan {
    kSend,      // `out` holds the append.
    kIdle,      // Nothing to send now (not leading, nothing new, or shipped elsewhere).
    kGone,      // The peer (or this node) no longer holds the shard.
    kRetry,     // This node's log could not be read: again after a pause.
    kReseed,    // The peer needs entries this log no longer holds.
    kDedicate,  // A learner: shipped at the move's pace by ShipDedicated.
  };

  Replicator(const ReplicatorOptions& options, EtcdClient* etcd, storage::ReplicationLog* log,
             storage::Store* store);

  std::string Key(absl::string_view suffix) const;
  bool LeaseValid() const;
  // Of the shard's voters.
  static uint32_t Majority(const Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    return static_cast<uint32_t>(shard.voters.size()) / 2 + 1;
  }
  static bool Holds(const std::vector<uint32_t>& nodes, uint32_t node) {
    return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
  }
  // The stub of a known node, or null. Shared: a caller's call goes on
  // with it while a newly registered address replaces it here.
  std::shared_ptr<replication::v1::Replication::Stub> PeerStub(uint32_t node);
  std::string Address(uint32_t node);

  // A follower's append, in three steps around the write of its entries:
  // the checks before it (false: refused, `append->response` says why),
  // the answer after it, and the apply of what is committed, which needs
  // no shard lock and is batched over every shard of a call.
  bool BeginAppend(Shard& shard, const replication::v1::AppendRequest& request,
                   FollowerAppend* append) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void FinishAppend(Shard& shard, const replication::v1::AppendRequest& request,
                    absl::Status appended, FollowerAppend* append)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void ApplyCommitted(std::vector<FollowerAppend>& appends);
  replication::v1::AppendResponse AppendAnswer(
      uint32_t shard, replication::v1::AppendResponse::Result result) const;

  absl::Status Join();
  // Records this node's shard count in etcd (shard-count) if the cluster
  // has none yet, and refuses a count other than the cluster's: the
  // recorded one, or for a cluster from before it was recorded, the one
  // its placement keys (`placed`) cover.
  absl::Status CheckShardCount(const std::vector<EtcdKeyValue>& placed);
  // Writes the initial placement of every shard that has none. A node
  // with a zone that finds no placement at all (a new cluster) first
  // waits, up to three leases, for every node's zone.
  absl::Status InitializePlacement();
  // Every node's zone as registered in etcd (zones/<i>), by index; ""
  // where a node registered none (yet).
  absl::StatusOr<std::vector<std::string>> ReadZones();
  // Takes the placement etcd holds for the shard: starts or stops holding
  // it (dropping its data once it holds it no more), gains or loses a vote,
  // and, when leading, the peers it ships to.
  void ApplyPlacement(Shard* shard, std::vector<uint32_t> voters, std::vector<uint32_t> learners,
                      int64_t revision) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu);
  // Starts a shipping loop for every peer of a shard held here without one.
  void EnsureShippers();
  // As the leader of a moving shard: the move's next step (§3 of
  // docs/elastic.md), or its rollback when the target is gone. Whether
  // this node leads a shard that is moving.
  bool AdvanceMoves();
  // Sleeps as long as sending `bytes` more to a learner needs at the move
  // rate, which every move this node sends shares: many small moves at
  // once copy no faster in all than one large one.
  void PaceMove(uint64_t bytes);
  absl::Status RenewLease();
  // Renews the etcd lease every quarter of its time to live, and steps
  // down from every shard once it has run out.
  void LeaseLoop();
  void CoordinateLoop();
  // Finds the shards this node may stand for and queues each once for
  // the election workers.
  void ElectionLoop();
  // Runs queued elections, one at a time; up to kElectionWorkers of them
  // run at once, so that elections that wait (on a hung voter, or for
  // their epoch's first entry) hold up no other shard's.
  void ElectionWorker();
  // Whether this node stands for the shard now: it has no leader, this
  // node votes for it, and its turn (core::StandWait) has come.
  bool DueForElection(const Shard& shard, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Hands `due` (each marked election_queued) to the election workers,
  // starting more of them if none is idle.
  void QueueElections(const std::vector<Shard*>& due);
  // Tells `peer` in the next round of its shipping loop that this node
  // handed it `shard` at `epoch` (ShipRequest.handoffs), so that it
  // stands at once rather than on its next read of etcd.
  void QueueHandOffNotice(uint32_t peer, uint32_t shard, uint64_t epoch);
  // A follower's side of those notices: marks each shard leaderless and
  // handed to this node, and queues its election when due.
  void TakeHandOffNotices(const replication::v1::ShipRequest& request);
  // Ships every shard this node leads to `peer`, all in one Ship call per
  // round, the next round as soon as there is more; heartbeats each tick.
  void ShipLoop(uint32_t peer);
  // Ships one shard to one peer: a learner until it votes, or a voter
  // once, to re-seed it.
  void ShipDedicated(Shard* shard, uint32_t peer);
  void StartDedicated(Shard* shard, uint32_t peer);
  // What to send `peer` for `shard` now: up to about `max_bytes` of
  // entries, or an empty append on a heartbeat round.
  ShipPlan PlanAppend(Shard* shard, uint32_t peer, size_t max_bytes, bool heartbeat,
                      bool from_shared_loop, Outgoing* out);
  // Takes a peer's answer to an append. True when it fenced this leader
  // (the caller releases the leader key); sets `*more` when the peer still
  // lacks entries.
  bool TakeAppendResult(const Outgoing& sent, uint32_t peer, grpc::Status status,
                        const replication::v1::AppendResponse& response, bool* more);
  // Wakes the shipping loops to look at every shard they ship: on a
  // change of leadership or placement, or at Stop.
  void KickShippers();
  // Wakes the loops of `peers` to send `shard`'s new entries, and only
  // that shard's unless more is due: with a thousand shards, a round
  // that looked at each of them would cost more than the write itself.
  struct NewEntries {
    uint32_t shard = 0;
    std::vector<uint32_t> peers;
  };
  void KickShippers(const std::vector<NewEntries>& appended);
  // Counts one call to `peer` carrying `entries` log entries, of
  // `entry_bytes` of batches, in appends of `bytes` encoded.
  void CountShipped(uint32_t peer, size_t entries, size_t bytes, size_t entry_bytes);
  // Notes that `peer` answered a replication call of this node's.
  void HeardFrom(uint32_t peer);
  void ReadLeadership();
  void Elect(Shard* shard);
  absl::Status CatchUpFrom(Shard* shard, uint32_t node, storage::LogPosition target,
                           uint64_t epoch);
  void StepDown(Shard* shard, absl::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu);
  void ReleaseLeaderKey(uint32_t shard, uint64_t epoch);
  // Raises the commit to what a majority holds (only entries of the
  // leader's own epoch count, §3) and wakes whoever waits for it.
  void AdvanceCommit(Shard* shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu);
  // Decides the pending writes of `shards` that can be: applies the
  // committed ones to the records (one RocksDB write for all of them) and
  // fails those whose leadership ended or whose time ran out, stepping
  // down for the latter; then runs the callbacks of the calls decided
  // whole. On whichever thread raised a commit, ended a leadership or
  // sweeps (CommitSweepLoop); takes no lock on entry, and leaves the
  // leader keys it gives up to ReleaseKeysLoop.
  void CompleteCommits(const std::vector<Shard*>& shards);
  // CompleteCommits for the shards with pending writes, every 100 ms and
  // at once when SweepCommitsSoon asks (a leadership ended, a commit was
  // raised outside a shipping round, Stop): their deadlines, and ends of
  // leadership that no shipping round sees.
  void CommitSweepLoop();
  void SweepCommitsSoon();
  // Releases in etcd the leader keys that CompleteCommits gave up.
  void ReleaseKeysLoop();
  // fsync durability: a leader's appends are written unsynced on the
  // thread that decided them, and so are a follower's (HandleShipAsync).
  // This loop syncs the log once for all of them that are waiting (a
  // group commit across shards and roles), then raises the commit of the
  // shards led here (the leader counts its own copy of an entry only once
  // a sync covers it, ReplicationLog::DurableSeq) and answers the Ship
  // calls whose appends the sync covered.
  void LogSyncLoop();
  // HandleShip's appends, without the sync; `*entries` tells whether the
  // call carried any entry, so that it needs one.
  replication::v1::ShipResponse TakeShip(const replication::v1::ShipRequest& request,
                                         bool* entries);
  // After a failed sync of the log: fails the store closed, unless a full
  // disk fenced the sync off (RESOURCE_EXHAUSTED).
  void LogSyncFailed(const absl::Status& status);
  // Asks LogSyncLoop for a sync that covers the appends just made to
  // `shards`.
  void SyncLogSoon(const std::vector<Shard*>& shards);
  // Records one write's outcome in its call, and runs the call's callback
  // once every write of it is decided; on this thread, without locks held.
  static void DecideWrite(const std::shared_ptr<CommitCall>& call, size_t index,
                          absl::Status status);
  // Copies the shard's records to a follower that needs entries this log
  // no longer holds, then lets it follow from there (§4).
  absl::Status Reseed(Shard* shard, uint32_t peer, uint64_t epoch);
  // Trims the logs of the shards this node leads through what every
  // replica holds, or what the retention bound leaves.
  void TrimLogs();
  // Stops serving the shard, waits until `to` (-1: any follower) holds its
  // whole log, and hands the shard to it through etcd; without such a
  // follower by `deadline`, keeps it when `to` was named and releases it
  // otherwise. True when handed over.
  bool HandOffShard(Shard* shard, int32_t to, absl::Time deadline, absl::string_view why);
  // Gives a shard back to its first replica once that one has been up and
  // caught up for a lease, so that leadership spreads over the nodes again
  // after a failover (a few shards per call).
  void BalanceLeaders();
  // Stops serving every shard this node leads once its lease may have
  // ended, or whose leader key is on a lease other than this node's
  // current one, so that it neither answers nor keeps followers from
  // electing.
  void StepDownWithoutLease();
  // Whether a majority of the shard's voters, this node among them,
  // acknowledged an append sent within core::ReadLease.
  bool ReadLeaseValid(const Shard& shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Whether the replica must promise `candidate` no new epoch yet: it
  // accepted an append from another leader within core::Stickiness, one
  // that did not hand the shard over at `handoff_epoch` or later.
  bool Sticky(const Shard& shard, uint32_t candidate, uint64_t handoff_epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Stops leading every shard whose voters have not answered from a
  // majority for a QuorumWindow, and releases its leader key: a leader cut
  // off from its followers but not from etcd would otherwise keep the
  // shard, unable to commit, for as long as it keeps its lease.
  void StepDownWithoutMajority();
  // Lets caught-up learners vote again: deletes their etcd keys, outside
  // the shard locks.
  void ClearCaughtUpLearners();

  const ReplicatorOptions options_;
  const size_t ship_bytes_;  // ShipBytes(options_.peer_message_bytes).
  EtcdClient* const etcd_;
  storage::ReplicationLog* const log_;
  storage::Store* const store_;
  std::vector<std::unique_ptr<Shard>> shards_;

  // The nodes: addresses (from the flags, then etcd's members/ keys), who
  // has a live lease and who drains. Stubs are never removed, so a
  // pointer to one stays valid.
  absl::Mutex nodes_mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(nodes_mu_);
  std::set<uint32_t> live_ ABSL_GUARDED_BY(nodes_mu_);
  std::set<uint32_t> draining_ ABSL_GUARDED_BY(nodes_mu_);
  // Each node's zone as it registered it (zones/<i>); "" none or unknown.
  std::vector<std::string> zones_ ABSL_GUARDED_BY(nodes_mu_);
  std::map<uint32_t, std::shared_ptr<replication::v1::Replication::Stub>> stubs_
      ABSL_GUARDED_BY(nodes_mu_);
  int64_t placement_revision_ ABSL_GUARDED_BY(nodes_mu_) = 0;

  // Shipping threads: one loop per peer, started by the coordinating
  // thread and kept until Stop, and the dedicated ones of Shard::dedicated.
  absl::Mutex shippers_mu_;
  std::set<uint32_t> shipping_ ABSL_GUARDED_BY(shippers_mu_);
  std::vector<std::thread> shippers_ ABSL_GUARDED_BY(shippers_mu_);
  // Bumped whenever entries are appended (and on Stop): the loops wait on it.
  absl::Mutex ship_mu_;
  uint64_t ship_generation_ ABSL_GUARDED_BY(ship_mu_) = 0;
  // Bumped by KickShippers(): every loop then looks at all its shards.
  uint64_t ship_all_generation_ ABSL_GUARDED_BY(ship_mu_) = 0;
  // By peer: shards with entries appended since its loop last took them.
  std::map<uint32_t, std::set<uint32_t>> ship_due_ ABSL_GUARDED_BY(ship_mu_);
  // By peer: hand-off notices for its loop's next round, and how many
  // taken notices are in a round that has not returned yet (HandOff waits
  // for both to drain before the node stops).
  std::map<uint32_t, std::vector<replication::v1::HandOffNotice>> handoff_notices_
      ABSL_GUARDED_BY(ship_mu_);
  size_t handoff_notices_sending_ ABSL_GUARDED_BY(ship_mu_) = 0;

  std::atomic<int64_t> lease_id_{0};
  // Steady-clock nanoseconds until which this node's lease is certainly its
  // own; 0: not at all.
  std::atomic<int64_t> lease_valid_until_ns_{0};

  std::atomic<uint64_t> leader_changes_{0};
  std::atomic<uint64_t> fenced_appends_{0};
  std::atomic<uint64_t> elections_lost_{0};
  std::atomic<uint64_t> handoff_notices_sent_{0};
  std::atomic<uint64_t> handoff_notices_stood_{0};
  // When each peer last answered a replication call of this node's, for
  // any shard: a peer that answers is reachable, even while some of its
  // shards wait their turn in the shipping budget or for a re-seed's
  // pages (StepDownWithoutMajority). Taken after a shard's lock, never
  // before.
  absl::Mutex heard_mu_;
  std::map<uint32_t, absl::Time> heard_ ABSL_GUARDED_BY(heard_mu_);
  mutable absl::Mutex shipped_mu_;
  std::map<uint32_t, ShipCounters> shipped_ ABSL_GUARDED_BY(shipped_mu_);

  absl::Mutex pace_mu_;
  // When the bytes every move has sent so far will have had their time at
  // move_bytes_per_second.
  absl::Time moves_paced_until_ ABSL_GUARDED_BY(pace_mu_) = absl::InfinitePast();

  absl::Mutex stop_mu_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::atomic<bool> stopped_{false};
  // Writes in the shards' `pending`, all told: whether CommitSweepLoop has work.
  std::atomic<uint64_t> pending_commits_{0};
  // Wakes CommitSweepLoop: a leadership ended (StepDown), or Stop. Taken
  // after a shard's mu, never before.
  absl::Mutex sweep_mu_;
  bool sweep_due_ ABSL_GUARDED_BY(sweep_mu_) = false;
  // Leader keys (shard, epoch) that CompleteCommits gave up, released in
  // etcd by ReleaseKeysLoop: an etcd call, which may wait for its
  // deadline, has no place on the threads that answer calls or decide
  // pending writes.
  std::vector<std::pair<uint32_t, uint64_t>> keys_to_release_ ABSL_GUARDED_BY(sweep_mu_);
  bool release_stopping_ ABSL_GUARDED_BY(sweep_mu_) = false;
  // Shards whose appends wait for LogSyncLoop's next sync (repeats
  // allowed), and whether it should end once nothing waits.
  absl::Mutex log_sync_mu_;
  std::vector<Shard*> to_sync_ ABSL_GUARDED_BY(log_sync_mu_);
  // Ship calls whose appends wait for the next sync, with their answers.
  struct ShipWaiter {
    replication::v1::ShipResponse response;
    ShipDone done;
  };
  std::vector<ShipWaiter> ship_waiters_ ABSL_GUARDED_BY(log_sync_mu_);
  bool log_sync_stopping_ ABSL_GUARDED_BY(log_sync_mu_) = false;
  // Set by HandOff: this node takes over no shard any more.
  std::atomic<bool> handing_off_{false};
  // The last read of etcd found a move that names this node as its source
  // or target: its passes and its election checks come at the moving pace,
  // since the target learns that it is a learner, and that a shard is
  // handed to it, from them.
  std::atomic<bool> named_in_move_{false};
  std::vector<std::thread> threads_;
  // The election workers and their queue.
  absl::Mutex elect_mu_;
  std::deque<Shard*> elect_queue_ ABSL_GUARDED_BY(elect_mu_);
  uint32_t elect_idle_ ABSL_GUARDED_BY(elect_mu_) = 0;
  std::vector<std::thread> electors_ ABSL_GUARDED_BY(elect_mu_);
};

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_REPLICATOR_H_
