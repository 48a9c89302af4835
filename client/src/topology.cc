#include "topology.h"

#include <algorithm>
#include <utility>

#include "grpc_deadline.h"
#include "storage/key_codec.h"

namespace dedup::client {
namespace {

// How long one node may take to answer for the cluster map.
constexpr absl::Duration kTopologyTimeout = absl::Seconds(2);

const std::string& OpNamespace(const v1::Operation& op) {
  switch (op.op_case()) {
    case v1::Operation::kClaim:
      return op.claim().namespace_();
    case v1::Operation::kComplete:
      return op.complete().namespace_();
    case v1::Operation::kRelease:
      return op.release().namespace_();
    case v1::Operation::kExtend:
      return op.extend().namespace_();
    default:
      return op.query().namespace_();
  }
}

const std::string& OpKey(const v1::Operation& op) {
  switch (op.op_case()) {
    case v1::Operation::kClaim:
      return op.claim().key();
    case v1::Operation::kComplete:
      return op.complete().key();
    case v1::Operation::kRelease:
      return op.release().key();
    case v1::Operation::kExtend:
      return op.extend().key();
    default:
      return op.query().key();
  }
}

}  // namespace

Topology::Topology(std::vector<std::string> seeds, const NodeConnection::Options& options,
                   Scheduler* scheduler, LiveCalls* live)
    : seeds_(std::move(seeds)), options_(options), scheduler_(scheduler), live_calls_(live) {
  absl::MutexLock lock(&mu_);
  owners_ = {NodeFor(seeds_.front())};
}

void Topology::Refresh() {
  std::vector<std::string> candidates;
  for (NodeConnection* node : Owners()) candidates.push_back(node->address());
  candidates.insert(candidates.end(), seeds_.begin(), seeds_.end());
  for (const std::string& address : candidates) {
    NodeConnection* node;
    {
      absl::MutexLock lock(&mu_);
      node = NodeFor(address);
    }
    grpc::ClientContext context;
    context.set_deadline(GrpcDeadlineIn(kTopologyTimeout));
    v1::TopologyResponse map;
    if (!node->stub()->Topology(&context, v1::TopologyRequest(), &map).ok()) continue;
    absl::MutexLock lock(&mu_);
    Adopt(map, node);
    return;
  }
}

void Topology::Adopt(const v1::TopologyResponse& map, NodeConnection* answered) {
  if (map.nodes_size() <= 1) {
    shard_count_ = 0;
    owners_ = {answered};
    return;
  }
  shard_count_ = map.shard_count();
  owners_.clear();
  for (const std::string& owner : map.nodes()) owners_.push_back(NodeFor(owner));
}

NodeConnection* Topology::Route(const v1::Operation& op) {
  absl::MutexLock lock(&mu_);
  if (shard_count_ == 0 || owners_.size() <= 1) return owners_.front();
  const uint32_t shard = storage::ShardOf(OpNamespace(op), OpKey(op), shard_count_);
  return owners_[storage::NodeOfShard(shard, static_cast<uint32_t>(owners_.size()))];
}

std::vector<NodeConnection*> Topology::Owners() {
  absl::MutexLock lock(&mu_);
  std::vector<NodeConnection*> unique;
  for (NodeConnection* node : owners_) {
    if (std::find(unique.begin(), unique.end(), node) == unique.end()) unique.push_back(node);
  }
  return unique;
}

void Topology::Close() {
  std::vector<NodeConnection*> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [address, node] : nodes_) all.push_back(node.get());
  }
  // Not under mu_: closing waits for the streams' last callbacks.
  for (NodeConnection* node : all) node->Close();
}

NodeConnection* Topology::NodeFor(const std::string& address) {
  std::unique_ptr<NodeConnection>& node = nodes_[address];
  if (node == nullptr) {
    node = std::make_unique<NodeConnection>(address, options_, scheduler_, live_calls_);
  }
  return node.get();
}

}  // namespace dedup::client
