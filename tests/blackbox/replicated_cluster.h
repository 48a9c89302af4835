#ifndef DEDUP_TESTS_BLACKBOX_REPLICATED_CLUSTER_H_
#define DEDUP_TESTS_BLACKBOX_REPLICATED_CLUSTER_H_

// A replicated dedupd cluster on 127.0.0.1 (or in a NetworkLab) for black-box tests
// (docs/replication.md): a single-member etcd and N dedupd binaries, each
// on an address fixed before any starts (every node must know every
// other's), with its own data directory under the test's work directory.
// Nodes are started, killed, stopped, paused and resumed by process id;
// who leads which shard is read from the nodes' Topology answers
// (shard_leaders.h), and where the shards are placed too (placement.h).
//
// A cluster may start with fewer nodes than it has addresses and grow
// (docs/elastic.md): the first `initial_nodes` form it, and node k started
// later is told the first k + 1 addresses, the ones before it as they
// were; it registers in etcd, and the others learn its address there.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "tests/blackbox/dedupd_process.h"
#include "tests/blackbox/network_lab.h"
#include "tests/blackbox/shard_leaders.h"
#include "tests/common/etcd_process.h"

namespace dedup::blackbox {

struct ReplicatedClusterOptions {
  // Addresses, chosen at Start; nodes 0..nodes-1 may run.
  int nodes = 3;
  // The nodes Start starts, 0..initial_nodes-1, which make up the cluster
  // etcd first records; 0: all of them. Node i is given --cluster_nodes of
  // the first max(initial_nodes, i + 1) addresses.
  int initial_nodes = 0;
  // --shards; 0: none, so each node takes dedupd's default (or a flag of
  // node_flags). The harness then knows no count, and its waits for
  // leaders and replication do not apply.
  uint32_t shards = 4;
  // Copies of each shard (--replication_factor). 0 starts the nodes as a
  // statically sharded cluster, without replication or etcd flags: what a
  // dedupd without replication serves, to check the harness itself.
  uint32_t replication_factor = 3;
  // --leader_lease: short, so that a failover takes seconds.
  absl::Duration leader_lease = absl::Seconds(2);
  std::string durability = "fsync";
  std::string cluster_name = "replication-test";
  // Added to every node's command line, after the harness's own flags.
  std::vector<std::string> extra_flags;
  // Added to one node's command line after those: node -> flags.
  std::map<int, std::vector<std::string>> node_flags;
  // Runs each node in its own network namespace of this lab, and etcd in
  // the lab's hub, where the test process must already be
  // (NetworkLab::EnterHub); null: everything on 127.0.0.1. The lab must
  // have a namespace for every node and outlive the cluster.
  const NetworkLab* network = nullptr;
};

// Not thread-safe, except where a method says so: drive the nodes from the
// test's main thread.
class ReplicatedCluster {
 public:
  // Starts etcd, then the initial nodes (all spawned before any is waited
  // for, as a node may wait for its peers), and returns once each answers
  // Topology, at most ~30 s. Errors name the node and carry its output.
  static absl::StatusOr<std::unique_ptr<ReplicatedCluster>> Start(
      const std::string& work_dir, const ReplicatedClusterOptions& options);

  // SIGKILLs every node still running, then etcd.
  ~ReplicatedCluster();

  ReplicatedCluster(const ReplicatedCluster&) = delete;
  ReplicatedCluster& operator=(const ReplicatedCluster&) = delete;

  int size() const { return static_cast<int>(addresses_.size()); }
  uint32_t shards() const { return options_.shards; }
  const ReplicatedClusterOptions& options() const { return options_; }
  // host:port of each node, in node order; the same across restarts.
  const std::vector<std::string>& addresses() const { return addresses_; }
  // Every address, comma-separated: a client's endpoint.
  std::string Endpoints() const;
  // The first `count` addresses, comma-separated.
  std::string Endpoints(int count) const;
  // The nodes Start started.
  int initial_nodes() const;
  std::string DataDir(int node) const;
  test::EtcdProcess& etcd() { return *etcd_; }

  // Starts the nodes (which must be down) on their addresses and data
  // directories and returns once each answers Topology. A node never
  // started before joins the cluster with an empty data directory.
  absl::Status StartNodes(const std::vector<int>& nodes);
  absl::Status StartNode(int node) { return StartNodes({node}); }
  // SIGKILL: no chance to hand anything over. Reaps it.
  ExitStatus KillNode(int node);
  // SIGTERM (a paused node is resumed first), and waits for the exit; a
  // node still running after `timeout` is killed and an error returned.
  absl::StatusOr<ExitStatus> StopNode(int node, absl::Duration timeout = absl::Seconds(30));
  // StopNode, which must end in exit code 0, then StartNode.
  absl::Status RestartNode(int node);
  // SIGSTOP and SIGCONT: the process keeps its sockets but answers nothing.
  void PauseNode(int node);
  void ResumeNode(int node);
  // Deletes the data directory of a node that is down.
  absl::Status WipeNode(int node);
  bool running(int node) const;
  bool paused(int node) const;
  // The current (or last) run's output of the node.
  std::string Output(int node) const;
  // The last lines of every node's last run, for failure messages.
  std::string OutputTails(int lines = 30) const;

  // Thread-safe: a stub straight to one node, whether it runs or not; its
  // channel reconnects within ~100 ms of the node's return.
  v1::Dedup::Stub& stub(int node) const { return *stubs_[node]; }
  // Thread-safe: every node's Topology answer, asked of all at once, each
  // within `timeout`; nullopt for a node that did not answer.
  TopologyAnswers AskTopology(absl::Duration timeout = absl::Milliseconds(500)) const;
  // Thread-safe: the leader of every shard now (shard_leaders.h).
  std::vector<Leadership> Leaders() const;
  // Waits until every shard has a leader and returns them. The error
  // describes who leads what and carries the nodes' output.
  absl::StatusOr<std::vector<Leadership>> WaitForAllShardsLed(absl::Duration timeout);
  // Waits until every shard has a leader whose answer lists
  // replication_factor replicas, each live and at most `max_behind`
  // entries behind. A statically sharded cluster only needs its leaders.
  absl::Status WaitForFullReplication(absl::Duration timeout, uint64_t max_behind = 0);

  // Waits until every node that answers lists `node` among its live nodes,
  // at its address.
  absl::Status WaitForLive(int node, absl::Duration timeout);
  // Waits until the newest placement (placement.h) is settled (no move, no
  // learner, replication_factor live voters per shard) and every shard is
  // led by one of its voters, and returns that placement. The error shows
  // the placement and carries the nodes' output.
  absl::StatusOr<v1::TopologyResponse> WaitForSettledPlacement(absl::Duration timeout);

  // The node leading the most shards (the lowest of a tie), or -1.
  static int BusiestLeader(const std::vector<Leadership>& leaders);

 private:
  struct Node {
    std::unique_ptr<DedupdProcess> process;  // Null while down.
    std::string log_path;                    // Of the current (or last) run.
    int runs = 0;
    bool paused = false;
  };

  ReplicatedCluster(std::string work_dir, ReplicatedClusterOptions options)
      : work_dir_(std::move(work_dir)), options_(std::move(options)) {}

  std::vector<std::string> FlagsOf(int node) const;
  // Every replica of every led shard is live and close enough, per the
  // leader's answer; otherwise what is not.
  std::optional<std::string> ReplicationGap(const TopologyAnswers& answers,
                                            const std::vector<Leadership>& leaders,
                                            uint64_t max_behind) const;

  const std::string work_dir_;
  const ReplicatedClusterOptions options_;
  // Constant after Start.
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<v1::Dedup::Stub>> stubs_;  // Reconnect quickly.

  std::vector<Node> nodes_;
  std::unique_ptr<test::EtcdProcess> etcd_;
};

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_REPLICATED_CLUSTER_H_
