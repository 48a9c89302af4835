#ifndef DEDUP_CLIENT_DEDUPCTL_CLUSTER_CHANGE_H_
#define DEDUP_CLIENT_DEDUPCTL_CLUSTER_CHANGE_H_

// `dedupctl cluster add-node | remove-node | move-shard | rebalance`:
// changes where a replicated cluster's shards live (docs/elastic.md), one
// shard move at a time per node, and reports progress while it waits.
// The moves themselves are carried out by each shard's leader; these
// commands plan them, start them through the MoveShard call and watch
// the nodes' Topology answers until the cluster is where it should be.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cluster_status.h"
#include "grpcpp/security/credentials.h"
#include "server/replication/placement.h"

namespace dedup::ctl {

// The cluster as its nodes report it, merged: placement from the answer
// with the newest placement revision, each shard's leader from the answer
// with its highest epoch, a move's progress from its leader.
struct PlacementView {
  uint32_t replication_factor = 1;
  std::vector<std::string> nodes;  // By node index; "" unknown.
  std::vector<std::string> zones;  // By node index; "" none or unknown.
  std::set<uint32_t> live;
  std::set<uint32_t> draining;
  struct Shard {
    std::vector<uint32_t> voters;
    std::vector<uint32_t> learners;
    int32_t leader = -1;
    uint64_t epoch = 0;
    bool moving = false;
    uint32_t move_from = 0;
    uint32_t move_to = 0;
    std::string move_state;
    uint64_t copied_bytes = 0;  // As its leader last reported.
  };
  std::vector<Shard> shards;

  // Index of the node with this address, or -1.
  int32_t IndexOf(const std::string& address) const;
  // Voters each node holds, for every node that may hold shards (live and
  // not draining), zero included.
  std::map<uint32_t, uint32_t> VoterCounts() const;
};

// Nullopt when no node answered.
std::optional<PlacementView> MergeAnswers(const std::vector<NodeAnswer>& answers);

using PlannedMove = server::replication::PlannedMove;

// The moves that bring the cluster to balance (server::replication::
// PlanBalance), for the nodes that are live and not draining.
std::vector<PlannedMove> PlanBalance(const PlacementView& view);

struct ChangeContext {
  std::string endpoints;  // Comma-separated.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  absl::Duration call_timeout = absl::Seconds(5);
  absl::Duration wait = absl::Minutes(30);  // For the whole command.
  // Moves under way at once, at most; each node sending moves paces them
  // together at its --move_bytes_per_second.
  size_t parallel_moves = 32;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
};

// Each returns the exit code: kExitOk once done, kExitError (the reason
// on err) when refused, timed out or a move rolled back.
int RunAddNode(const ChangeContext& context, const std::string& address);
int RunRemoveNode(const ChangeContext& context, const std::string& address);
int RunMoveShard(const ChangeContext& context, uint32_t shard, const std::string& to,
                 const std::string& from);
int RunRebalance(const ChangeContext& context);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_CLUSTER_CHANGE_H_
