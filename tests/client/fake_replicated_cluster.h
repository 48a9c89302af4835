#ifndef DEDUP_TESTS_CLIENT_FAKE_REPLICATED_CLUSTER_H_
#define DEDUP_TESTS_CLIENT_FAKE_REPLICATED_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dedup::client::test {

// A replicated cluster as its clients see it, for what the client must do
// while leadership moves: `node_count` Dedup services on 127.0.0.1 port 0
// sharing one leadership table that the test changes. Every shard has every
// node as a replica (replication_factor = node_count). A node:
//  - answers Topology with the whole table, and for the shards it leads
//    with each replica's status (live unless that node was stopped or
//    marked down; `behind` as the test set it);
//  - answers a Claim (alone or as a Stream item) of a shard it leads
//    ACQUIRED with kToken; of a shard another node leads
//    FAILED_PRECONDITION naming that node; of a shard without a leader
//    UNAVAILABLE. Other calls are UNIMPLEMENTED.
// A stopped node fails every call at the transport level; a hung one
// answers nothing. Thread-safe.
class FakeReplicatedCluster {
 public:
  static constexpr uint64_t kToken = 11;

  // Every shard starts led by node 0 at epoch 1.
  FakeReplicatedCluster(int node_count, uint32_t shard_count);
  ~FakeReplicatedCluster();

  // False if a node could not start.
  bool ok() const;
  const std::vector<std::string>& addresses() const { return addresses_; }
  uint32_t shard_count() const { return shard_count_; }
  // The shard of a key of namespace "orders".
  uint32_t ShardOf(const std::string& key) const;

  // `node` (-1: nobody) leads `shard` from now on, at the next epoch.
  void SetLeader(uint32_t shard, int node);
  void SetEveryLeader(int node);
  // The next `times` Claims that reach their shard's leader find that it
  // has just handed the shard to the next node (at the next epoch), and are
  // refused: leadership moving while the call is on its way.
  void MoveLeadershipOnArrival(int times);

  // Shuts `node` down: from now on it cannot be reached, and its replicas
  // are reported not live.
  void Stop(int node);
  // Makes `node` hang, as a paused process or a cut network does: it
  // still accepts connections and calls, and answers none of them (nor
  // any already waiting) until Resume.
  void Hang(int node);
  void Resume(int node);
  // Reports `node`'s replicas not live, though it still answers.
  void MarkReplicaDown(int node);
  // Reports `node`'s replicas `behind` entries behind their leader.
  void SetBehind(int node, uint64_t behind);

  // Claims `node` answered ACQUIRED, FAILED_PRECONDITION, UNAVAILABLE.
  int served(int node) const;
  int refused(int node) const;
  int unavailable(int node) const;
  int refused_total() const;

 private:
  class Node;
  struct Counts {
    int served = 0;
    int refused = 0;
    int unavailable = 0;
  };
  struct ShardState {
    int leader = 0;
    uint64_t epoch = 1;
  };

  // Waits while `node` hangs, unless the cluster is being destroyed.
  void WaitWhileHung(int node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What `node` answers to a Claim of `key`.
  grpc::Status ClaimAt(int node, const std::string& ns, const std::string& key,
                       v1::ClaimResponse* response);
  v1::TopologyResponse TopologyAt(int node);

  const uint32_t shard_count_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::string> addresses_;

  mutable absl::Mutex mu_;
  std::vector<ShardState> shards_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> live_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> hung_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> behind_ ABSL_GUARDED_BY(mu_);
  std::vector<Counts> counts_ ABSL_GUARDED_BY(mu_);
  int moves_on_arrival_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dedup::client::test

#endif  // DEDUP_TESTS_CLIENT_FAKE_REPLICATED_CLUSTER_H_
