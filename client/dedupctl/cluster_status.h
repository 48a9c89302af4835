#ifndef DEDUP_CLIENT_DEDUPCTL_CLUSTER_STATUS_H_
#define DEDUP_CLIENT_DEDUPCTL_CLUSTER_STATUS_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dedup/v1/dedup.pb.h"
#include "grpcpp/security/credentials.h"

namespace dedup::ctl {

// `dedupctl cluster status`: who leads each shard, at which epoch, and how
// each replica follows, from every node's own Topology answer.

// What one node answered to Topology, or why it did not.
struct NodeAnswer {
  std::string address;
  absl::StatusOr<v1::TopologyResponse> topology;
};

// Asks the endpoints (comma-separated) for Topology until one answers,
// then every other node its map names, at once, each within `timeout`.
// The answers are under the addresses the map gives the nodes; an endpoint
// that did not answer is listed under its own. Credentials null: plaintext.
std::vector<NodeAnswer> AskEveryNode(const std::string& endpoints,
                                     const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                     absl::Duration timeout);

struct ReplicaRow {
  std::string address;
  uint64_t last_epoch = 0;
  uint64_t last_seq = 0;
  uint64_t applied_seq = 0;
  uint64_t behind = 0;
  bool live = false;
};

struct ShardRow {
  uint32_t shard = 0;
  // Replicated: the leader ("" while none); otherwise the owner.
  std::string node;
  uint64_t epoch = 0;
  // Replicated: whether the leader answered with its replicas, and those.
  bool replicas_known = false;
  std::vector<ReplicaRow> replicas;
};

struct ClusterStatus {
  bool replicated = false;
  uint32_t replication_factor = 1;
  std::vector<std::string> nodes;
  // Replicated: each node's zone, by index ("" none given); and one line
  // per zone whose loss alone would leave shards without a majority of
  // their voters, naming them. Not problems: the cluster serves, but a
  // zone outage would not leave it whole.
  std::vector<std::string> zones;
  std::vector<std::string> zone_risks;
  // Replicated: how many shards each node leads, by index like `nodes`,
  // and how far the busiest is above an even share over every listed
  // node, in percent (0: even). A node that leads none, down or drained,
  // counts: the others lead its share.
  std::vector<size_t> leads;
  double leader_spread_percent = 0;
  std::vector<std::string> unreachable;  // "address: why".
  std::vector<ShardRow> shards;
  // One line each: a shard without a leader (or whose leader or owner did
  // not answer), or with fewer live replicas than a majority.
  std::vector<std::string> problems;
};

// The cluster's status from every node's answer. For each shard the leader
// and epoch are the newest any node reported (the highest epoch), and its
// replicas are as that leader reported them: only the leader knows them.
// A replica counts as live if the leader reported it so; the leader itself
// counts as live. Requires at least one answer that is OK.
ClusterStatus Summarize(const std::vector<NodeAnswer>& answers);

// One line per shard under a heading, then the nodes that did not answer.
std::string RenderText(const ClusterStatus& status);
// One JSON object.
std::string RenderJson(const ClusterStatus& status);

// The whole command: asks, prints the status on `out` and the problems on
// `err`, and returns the exit code: kExitOk, kExitError when no endpoint
// answered, kExitClusterDegraded when there are problems.
int RunClusterStatus(const std::string& endpoints,
                     const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                     absl::Duration timeout, bool json, std::ostream& out, std::ostream& err);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_CLUSTER_STATUS_H_
