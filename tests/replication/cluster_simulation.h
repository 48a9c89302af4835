#ifndef DEDUP_TESTS_REPLICATION_CLUSTER_SIMULATION_H_
#define DEDUP_TESTS_REPLICATION_CLUSTER_SIMULATION_H_

// A deterministic simulation of a replicated cluster's shards
// (docs/replication.md, docs/elastic.md): nodes, a network, etcd and a
// clock, all in memory and driven by one seeded random source. It plays
// the protocol the replicator runs, deciding with the same rules
// (server/replication/): elections with promises, shipping and the commit
// point, leases in etcd, and the steps of shard moves. Faults are drawn
// from the seed: messages dropped, delayed, reordered and duplicated,
// links cut both ways or one way, a node cut off from etcd only, paused
// (SIGSTOP) or crashed and restarted (losing what its disk had not yet
// synced), a node's disk slow to sync, a node's etcd lease ended early,
// and moves started at random.
//
// After every event the invariants are checked:
//   - at most one node leads a shard per epoch;
//   - at most one node may answer a shard's reads at any moment;
//   - a committed entry is never changed, and every majority of the
//     shard's voters holds it (so no election can lose it, and no replica
//     is removed while it holds copies a majority needs);
//   - fencing tokens grow (each new leader's epoch is above every earlier);
//   - once a majority of a shard's voters and etcd can reach each other,
//     the shard has a leader that can commit within `leader_bound`.
// The first violation stops the run; its text names the seed, which
// replays the run exactly.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/replication/move_rule.h"

namespace dedup::tests::replication {

namespace core = ::dedup::server::replication;

// A fault at a set moment, for scenarios.
struct ScriptedFault {
  enum class Kind {
    kPause,         // SIGSTOP, then SIGCONT after `lasting`.
    kCrash,         // SIGKILL, then a restart after `lasting`.
    kCutFromPeers,  // Every link to and from the other nodes; etcd still reachable.
    kCutFromEtcd,   // etcd only.
    kRevokeLease,   // etcd ends the node's lease now, long before it is due.
  };
  absl::Duration at;
  Kind kind = Kind::kPause;
  int32_t node = -1;  // -1: the node that leads the most shards then.
  absl::Duration lasting = absl::Seconds(30);
};

struct SimulationOptions {
  uint64_t seed = 1;
  uint32_t nodes = 4;
  uint32_t shards = 4;
  uint32_t replication_factor = 3;
  absl::Duration lease_ttl = absl::Seconds(3);  // dedupd's default
  absl::Duration duration = absl::Seconds(120);

  // The network: every message is delayed by a uniform draw from
  // [min_delay, max_delay] (so messages reorder), dropped with
  // `drop_rate` and delivered twice with `duplicate_rate`.
  absl::Duration min_delay = absl::Microseconds(200);
  absl::Duration max_delay = absl::Milliseconds(3);
  double drop_rate = 0;
  double duplicate_rate = 0;
  // One etcd request, as a node's caller waits for it.
  absl::Duration etcd_delay = absl::Milliseconds(2);

  // Faults drawn from the seed: one every `fault_every` on average, each
  // lasting up to `fault_for`. Kinds enabled below.
  absl::Duration fault_every = absl::Seconds(15);
  absl::Duration fault_for = absl::Seconds(20);
  bool crashes = false;
  bool pauses = false;
  bool partitions = false;      // Symmetric and one-way cuts between nodes.
  bool etcd_isolation = false;  // A node cut off from etcd only.
  bool slow_nodes = false;      // All of a node's links delayed by 100 ms.
  bool slow_disks = false;      // Every sync of a node's log takes 50-300 ms.
  // etcd ends a node's lease early (etcd 3.4 had that bug): its leader
  // keys go at once, while the node still counts on the lease.
  bool early_revocations = false;
  std::vector<ScriptedFault> script;
  // Shard moves started at random (one at a time per shard).
  bool moves = false;
  absl::Duration move_every = absl::Seconds(5);
  // Client writes to each shard's leader, one every this long on average.
  absl::Duration write_every = absl::Milliseconds(20);

  // The liveness bound. Zero: the old leader's lease, ten ticks, and two
  // election rounds lost to a silent voter with their back-off (6.6 s with
  // a 2 s lease, 9.8 s at the default 3 s).
  absl::Duration leader_bound = absl::ZeroDuration();
  // Shards are held to the bound only from this moment on (a scenario
  // about one fault may leave out how the cluster started).
  absl::Duration check_liveness_from = absl::ZeroDuration();

  // How a node's driver runs elections: at most `election_threads` at
  // once (0: any number), each thread waiting, once it has won, until the
  // epoch's first entry commits when `election_waits_for_start` (the
  // replicator's ElectionWorker: 64 threads that wait).
  uint32_t election_threads = 64;
  bool election_waits_for_start = true;
  // Whether a ballot waits for every voter's answer (or the call's
  // deadline) even once it is lost.
  bool ballot_waits_for_all = false;
  // Whether a leader that hears from no majority of voters for a lease
  // steps down (and releases its leader key) so that the voters it cannot
  // reach may elect.
  bool leader_checks_quorum = true;
  // Whether a leader answers reads only while a majority acknowledged it
  // within core::ReadLease, and a replica refuses promises for
  // core::Stickiness after an append. Without both, a leader whose lease
  // etcd ended early answers reads after another has written.
  bool read_lease = true;
  // Whether a leader counts its own entry towards the commit only once
  // its disk has synced it (as the replicator does: in fsync durability
  // it ships an entry while a thread of its own syncs the log, and counts
  // its copy once ReplicationLog::DurableSeq covers it).
  bool leader_counts_synced_entries = true;
  // Whether a follower answers an append only once its disk has synced
  // the entries (as HandleShip does: it writes every shard of a call,
  // syncs once, then answers all of them).
  bool follower_answers_after_sync = true;
  // Whether a leader hands a shard back to its first voter once that one
  // has answered steadily for a lease (the replicator's BalanceLeaders).
  bool hand_back = false;
  // Whether a leader that hands a shard to a named follower tells it
  // directly once etcd names no leader (the replicator's hand-off notice
  // on its shipping stream), so that the target stands at once instead
  // of on its next read of etcd.
  bool handoff_notices = true;

  // Keep the trace of the run's last events even when it passes.
  bool trace = false;

  // The rule a leader follows to advance a move.
  std::function<core::MoveStep(const core::MoveFacts&)> move_rule = core::DecideMoveStep;
};

struct SimulationResult {
  bool ok = true;
  std::string violation;  // With the seed and the simulated time.
  // What happened, for the test's own assertions and for a soak's report.
  uint64_t committed = 0;  // Entries committed, over all shards.
  uint64_t elections_won = 0;
  uint64_t moves_done = 0;
  uint64_t faults = 0;
  absl::Duration longest_leaderless;  // Counted only while a majority could lead.
  uint32_t led_by_first_voter = 0;    // Shards, at the end of the run.
  // Planned hand-offs to a named follower whose target won the shard
  // next, and the time from each hand-off to that win (sorted).
  std::vector<absl::Duration> handoff_gaps;
  std::string trace;  // The last events, when the run failed.
};

SimulationResult RunSimulation(const SimulationOptions& options);

}  // namespace dedup::tests::replication

#endif  // DEDUP_TESTS_REPLICATION_CLUSTER_SIMULATION_H_
