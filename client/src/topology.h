#ifndef DEDUP_CLIENT_SRC_TOPOLOGY_H_
#define DEDUP_CLIENT_SRC_TOPOLOGY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "live_calls.h"
#include "node_connection.h"
#include "scheduler.h"

namespace dedup::client {

// The cluster as the client sees it: its nodes, and which of them owns
// which key. Every key goes straight to the node that owns its shard, by
// the rule the server checks (storage::ShardOf, then NodeOfShard), each node
// over its own NodeConnection, so a node that is down fails only its own
// keys. Until a node answers with a cluster map, the first seed owns every
// key. Thread-safe.
class Topology {
 public:
  // `seeds`: the endpoints the client was given, at least one. Connections
  // are made with `options`; `scheduler` and `live` must outlive the
  // topology (see NodeConnection).
  Topology(std::vector<std::string> seeds, const NodeConnection::Options& options,
           Scheduler* scheduler, LiveCalls* live);

  // Asks the known nodes, then the seeds, for the cluster map and adopts
  // the first answer; keeps the map it has if none answers. Blocks, up to a
  // few seconds for each node asked.
  void Refresh();

  // The node that owns the key of `op`.
  NodeConnection* Route(const v1::Operation& op);

  // Every node of the map, once each.
  std::vector<NodeConnection*> Owners();

  // Closes the streams of every node ever known and waits for them to end.
  // Call once nothing is sent any more.
  void Close();

 private:
  NodeConnection* NodeFor(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Adopt(const v1::TopologyResponse& map, NodeConnection* answered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::vector<std::string> seeds_;
  const NodeConnection::Options options_;
  Scheduler* const scheduler_;
  LiveCalls* const live_calls_;

  absl::Mutex mu_;
  // Every node ever known, by address; none is removed while the topology
  // lives, so pointers to them stay valid.
  std::map<std::string, std::unique_ptr<NodeConnection>> nodes_ ABSL_GUARDED_BY(mu_);
  uint32_t shard_count_ ABSL_GUARDED_BY(mu_) = 0;             // 0: not a cluster.
  std::vector<NodeConnection*> owners_ ABSL_GUARDED_BY(mu_);  // By node index.
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_TOPOLOGY_H_
