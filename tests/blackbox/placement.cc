#include "tests/blackbox/placement.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dedup::blackbox {
namespace {

template <typename List>
std::string Nodes(const List& nodes) {
  return nodes.empty() ? "-" : absl::StrJoin(nodes, ",");
}

bool Contains(const google::protobuf::RepeatedField<uint32_t>& list, int node) {
  return node >= 0 &&
         std::find(list.begin(), list.end(), static_cast<uint32_t>(node)) != list.end();
}

}  // namespace

std::optional<v1::TopologyResponse> NewestPlacement(const TopologyAnswers& answers) {
  const v1::TopologyResponse* newest = nullptr;
  for (const std::optional<v1::TopologyResponse>& answer : answers) {
    if (!answer.has_value()) continue;
    if (newest == nullptr || answer->placement_revision() > newest->placement_revision()) {
      newest = &*answer;
    }
  }
  if (newest == nullptr) return std::nullopt;
  return *newest;
}

std::vector<int> VotersPerNode(const v1::TopologyResponse& placement, int min_nodes) {
  std::vector<int> voters(std::max(min_nodes, 0), 0);
  for (const v1::ShardLeader& shard : placement.leaders()) {
    for (uint32_t node : shard.voters()) {
      if (node >= voters.size()) voters.resize(node + 1, 0);
      ++voters[node];
    }
  }
  return voters;
}

std::optional<std::string> UnsettledPlacement(const v1::TopologyResponse& placement,
                                              uint32_t replication_factor) {
  if (placement.leaders_size() == 0) return "the answer lists no shards";
  for (const v1::ShardLeader& shard : placement.leaders()) {
    const std::string name = absl::StrCat("shard ", shard.shard());
    if (shard.has_move())
      return absl::StrCat(name, " is moving: ", shard.move().ShortDebugString());
    if (shard.learners_size() > 0) {
      return absl::StrCat(name, " has learners ", Nodes(shard.learners()));
    }
    const std::set<uint32_t> distinct(shard.voters().begin(), shard.voters().end());
    if (shard.voters_size() != static_cast<int>(replication_factor) ||
        distinct.size() != static_cast<size_t>(shard.voters_size())) {
      return absl::StrCat(name, " has voters ", Nodes(shard.voters()), ", not ", replication_factor,
                          " distinct nodes");
    }
    for (uint32_t voter : shard.voters()) {
      if (!Contains(placement.live_nodes(), static_cast<int>(voter))) {
        return absl::StrCat(name, " has voter ", voter, ", which is not live");
      }
    }
  }
  return std::nullopt;
}

std::vector<std::string> Imbalance(const v1::TopologyResponse& placement,
                                   const std::vector<int>& nodes) {
  std::vector<std::string> problems;
  if (nodes.empty()) return {"no nodes to balance over"};
  const std::vector<int> voters =
      VotersPerNode(placement, *std::max_element(nodes.begin(), nodes.end()) + 1);
  int64_t total = 0;
  for (size_t node = 0; node < voters.size(); ++node) {
    total += voters[node];
    if (voters[node] > 0 &&
        std::find(nodes.begin(), nodes.end(), static_cast<int>(node)) == nodes.end()) {
      problems.push_back(absl::StrCat("node ", node, " is not one of ", Nodes(nodes),
                                      " but votes for ", voters[node], " shard(s)"));
    }
  }
  // |voters - total / n| <= 1, in integers.
  const int64_t n = static_cast<int64_t>(nodes.size());
  for (int node : nodes) {
    if (std::llabs(voters[node] * n - total) > n) {
      problems.push_back(absl::StrCat("node ", node, " votes for ", voters[node],
                                      " shard(s); the mean over ", Nodes(nodes), " is ", total, "/",
                                      n));
    }
  }
  return problems;
}

bool VotesFor(const v1::ShardLeader& shard, int node) { return Contains(shard.voters(), node); }

bool LearnsFor(const v1::ShardLeader& shard, int node) { return Contains(shard.learners(), node); }

const v1::ShardLeader* ShardIn(const v1::TopologyResponse& placement, uint32_t shard) {
  for (const v1::ShardLeader& leader : placement.leaders()) {
    if (leader.shard() == shard) return &leader;
  }
  return nullptr;
}

std::string DescribePlacement(const v1::TopologyResponse& placement) {
  std::vector<std::string> shards;
  for (const v1::ShardLeader& shard : placement.leaders()) {
    std::string line = absl::StrCat("shard ", shard.shard(), ": voters ", Nodes(shard.voters()));
    if (shard.learners_size() > 0) absl::StrAppend(&line, " learners ", Nodes(shard.learners()));
    if (shard.has_move()) absl::StrAppend(&line, " move {", shard.move().ShortDebugString(), "}");
    shards.push_back(std::move(line));
  }
  return absl::StrCat("revision ", placement.placement_revision(), ", answered by node ",
                      placement.node_index(), ", live ", Nodes(placement.live_nodes()),
                      ", draining ", Nodes(placement.draining_nodes()), "; ",
                      absl::StrJoin(shards, "; "));
}

}  // namespace dedup::blackbox
