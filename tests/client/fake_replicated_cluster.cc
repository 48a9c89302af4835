#include "tests/client/fake_replicated_cluster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/key_codec.h"
#include "tests/client/scripted_dedup.h"

namespace dedup::client::test {

// One node: its answers come from the cluster's table.
class FakeReplicatedCluster::Node final : public v1::Dedup::Service {
 public:
  Node(FakeReplicatedCluster* cluster, int index) : cluster_(cluster), index_(index) {}

  grpc::Status Claim(grpc::ServerContext* /*context*/, const v1::ClaimRequest* request,
                     v1::ClaimResponse* response) override {
    return cluster_->ClaimAt(index_, request->namespace_(), request->key(), response);
  }

  grpc::Status Stream(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<v1::BatchResponse, v1::BatchRequest>* stream) override {
    return AnswerClaimStream(
        stream, [this](const v1::ClaimRequest& request, v1::ClaimResponse* response) {
          return cluster_->ClaimAt(index_, request.namespace_(), request.key(), response);
        });
  }

  grpc::Status Topology(grpc::ServerContext* /*context*/, const v1::TopologyRequest* /*request*/,
                        v1::TopologyResponse* response) override {
    *response = cluster_->TopologyAt(index_);
    return grpc::Status::OK;
  }

 private:
  FakeReplicatedCluster* const cluster_;
  const int index_;
};

FakeReplicatedCluster::FakeReplicatedCluster(int node_count, uint32_t shard_count)
    : shard_count_(shard_count),
      shards_(shard_count),
      live_(node_count, true),
      hung_(node_count, false),
      behind_(node_count, 0),
      counts_(node_count) {
  for (int i = 0; i < node_count; ++i) {
    nodes_.push_back(std::make_unique<Node>(this, i));
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(nodes_.back().get());
    servers_.push_back(builder.BuildAndStart());
    addresses_.push_back(servers_.back() != nullptr && port != 0 ? absl::StrCat("127.0.0.1:", port)
                                                                 : "");
  }
}

FakeReplicatedCluster::~FakeReplicatedCluster() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;  // Hung handlers return, so that the servers can stop.
  }
  for (auto& server : servers_) {
    if (server != nullptr) server->Shutdown(absl::ToChronoTime(absl::Now()));
  }
}

bool FakeReplicatedCluster::ok() const {
  for (const std::string& address : addresses_) {
    if (address.empty()) return false;
  }
  return true;
}

uint32_t FakeReplicatedCluster::ShardOf(const std::string& key) const {
  return storage::ShardOf("orders", key, shard_count_);
}

void FakeReplicatedCluster::SetLeader(uint32_t shard, int node) {
  absl::MutexLock lock(&mu_);
  shards_[shard].leader = node;
  ++shards_[shard].epoch;
}

void FakeReplicatedCluster::SetEveryLeader(int node) {
  for (uint32_t shard = 0; shard < shard_count_; ++shard) SetLeader(shard, node);
}

void FakeReplicatedCluster::MoveLeadershipOnArrival(int times) {
  absl::MutexLock lock(&mu_);
  moves_on_arrival_ = times;
}

void FakeReplicatedCluster::Stop(int node) {
  {
    absl::MutexLock lock(&mu_);
    live_[node] = false;
  }
  // Not under mu_: shutting down waits for the node's handlers, which take it.
  servers_[node]->Shutdown(absl::ToChronoTime(absl::Now()));
}

void FakeReplicatedCluster::Hang(int node) {
  absl::MutexLock lock(&mu_);
  hung_[node] = true;
}

void FakeReplicatedCluster::Resume(int node) {
  absl::MutexLock lock(&mu_);
  hung_[node] = false;
}

void FakeReplicatedCluster::WaitWhileHung(int node) {
  auto answering = [this, node]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closing_ || !hung_[node]; };
  mu_.Await(absl::Condition(&answering));
}

void FakeReplicatedCluster::MarkReplicaDown(int node) {
  absl::MutexLock lock(&mu_);
  live_[node] = false;
}

void FakeReplicatedCluster::SetBehind(int node, uint64_t behind) {
  absl::MutexLock lock(&mu_);
  behind_[node] = behind;
}

int FakeReplicatedCluster::served(int node) const {
  absl::MutexLock lock(&mu_);
  return counts_[node].served;
}

int FakeReplicatedCluster::refused(int node) const {
  absl::MutexLock lock(&mu_);
  return counts_[node].refused;
}

int FakeReplicatedCluster::unavailable(int node) const {
  absl::MutexLock lock(&mu_);
  return counts_[node].unavailable;
}

int FakeReplicatedCluster::refused_total() const {
  absl::MutexLock lock(&mu_);
  int total = 0;
  for (const Counts& counts : counts_) total += counts.refused;
  return total;
}

grpc::Status FakeReplicatedCluster::ClaimAt(int node, const std::string& ns, const std::string& key,
                                            v1::ClaimResponse* response) {
  const uint32_t shard = storage::ShardOf(ns, key, shard_count_);
  absl::MutexLock lock(&mu_);
  WaitWhileHung(node);
  ShardState& state = shards_[shard];
  if (state.leader == node && moves_on_arrival_ > 0) {
    --moves_on_arrival_;
    state.leader = (node + 1) % static_cast<int>(addresses_.size());
    ++state.epoch;
  }
  if (state.leader < 0) {
    ++counts_[node].unavailable;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("shard ", shard, " has no leader (epoch ", state.epoch, ")"));
  }
  if (state.leader != node) {
    ++counts_[node].refused;
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("shard ", shard, " is led by node ", state.leader, " at ",
                     addresses_[state.leader], " (epoch ", state.epoch, "); this is node ", node));
  }
  ++counts_[node].served;
  response->set_outcome(v1::ClaimResponse::ACQUIRED);
  response->set_token(kToken);
  return grpc::Status::OK;
}

v1::TopologyResponse FakeReplicatedCluster::TopologyAt(int node) {
  v1::TopologyResponse map;
  map.set_shard_count(shard_count_);
  for (const std::string& address : addresses_) map.add_nodes(address);
  map.set_node_index(node);
  map.set_replication_factor(static_cast<uint32_t>(addresses_.size()));
  absl::MutexLock lock(&mu_);
  WaitWhileHung(node);
  uint64_t version = 0;
  for (uint32_t shard = 0; shard < shard_count_; ++shard) {
    const ShardState& state = shards_[shard];
    version += state.epoch;
    v1::ShardLeader* leader = map.add_leaders();
    leader->set_shard(shard);
    leader->set_leader(state.leader);
    leader->set_epoch(state.epoch);
    if (state.leader != node) continue;
    constexpr uint64_t kLastSeq = 100;
    for (size_t replica = 0; replica < addresses_.size(); ++replica) {
      v1::ReplicaStatus* status = leader->add_replicas();
      status->set_node(static_cast<uint32_t>(replica));
      status->set_last_epoch(state.epoch);
      status->set_last_seq(kLastSeq - behind_[replica]);
      status->set_applied_seq(kLastSeq - behind_[replica]);
      status->set_behind(behind_[replica]);
      status->set_live(live_[replica]);
    }
  }
  map.set_version(version);
  return map;
}

}  // namespace dedup::client::test
