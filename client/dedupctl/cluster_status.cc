#include "cluster_status.h"

#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "exit_codes.h"
#include "grpcpp/create_channel.h"
#include "nlohmann/json.hpp"
#include "server/replication/placement.h"
#include "storage/key_codec.h"

namespace dedup::ctl {
namespace {

absl::StatusOr<v1::TopologyResponse> AskOne(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    absl::Duration timeout) {
  auto channel = grpc::CreateChannel(
      address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials());
  auto stub = v1::Dedup::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::TopologyResponse map;
  const grpc::Status status = stub->Topology(&context, v1::TopologyRequest(), &map);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return map;
}

// The entry of `shard` in `map`, or null.
const v1::ShardLeader* LeaderEntry(const v1::TopologyResponse& map, uint32_t shard) {
  if (shard < static_cast<uint32_t>(map.leaders_size()) && map.leaders(shard).shard() == shard) {
    return &map.leaders(shard);
  }
  for (const v1::ShardLeader& entry : map.leaders()) {
    if (entry.shard() == shard) return &entry;
  }
  return nullptr;
}

// The address of node `index` of `map`, or "" for none.
std::string NodeAddress(const v1::TopologyResponse& map, int64_t index) {
  return index >= 0 && index < map.nodes_size() ? map.nodes(static_cast<int>(index)) : "";
}

// The answers that came, by address.
using Answered = std::map<std::string, const v1::TopologyResponse*>;

void AddStaticShards(const Answered& answered, uint32_t shard_count, ClusterStatus* status) {
  const auto n = static_cast<uint32_t>(status->nodes.size());
  for (uint32_t shard = 0; shard < shard_count; ++shard) {
    ShardRow row;
    row.shard = shard;
    row.node = status->nodes[storage::NodeOfShard(shard, n)];
    if (answered.count(row.node) == 0) {
      status->problems.push_back(
          absl::StrCat("shard ", shard, ": its node ", row.node, " did not answer"));
    }
    status->shards.push_back(std::move(row));
  }
}

// Fills `row` with the replicas `leader_map` (the leader's own answer)
// reports; false if it does not report leading the shard.
bool AddReplicas(const v1::TopologyResponse& leader_map, ShardRow* row) {
  const v1::ShardLeader* own = LeaderEntry(leader_map, row->shard);
  if (own == nullptr || own->leader() != static_cast<int64_t>(leader_map.node_index())) {
    return false;
  }
  row->replicas_known = true;
  for (const v1::ReplicaStatus& replica : own->replicas()) {
    ReplicaRow out;
    out.address = NodeAddress(leader_map, replica.node());
    if (out.address.empty()) out.address = absl::StrCat("node ", replica.node());
    out.last_epoch = replica.last_epoch();
    out.last_seq = replica.last_seq();
    out.applied_seq = replica.applied_seq();
    out.behind = replica.behind();
    out.live = replica.live();
    row->replicas.push_back(std::move(out));
  }
  return true;
}

// The shards that one zone's loss alone would leave without a majority of
// their voters, as the newest placement any node answered has them: one
// line per zone. Nothing when no node gave a zone.
std::vector<std::string> ZoneRisks(const Answered& answered, uint32_t shard_count,
                                   const std::vector<std::string>& zones) {
  if (std::all_of(zones.begin(), zones.end(), [](const std::string& z) { return z.empty(); })) {
    return {};
  }
  const v1::TopologyResponse* newest = nullptr;
  for (const auto& [address, map] : answered) {
    if (newest == nullptr || map->placement_revision() > newest->placement_revision()) {
      newest = map;
    }
  }
  std::map<std::string, std::vector<std::string>> exposed;  // Zone -> shards.
  for (uint32_t shard = 0; shard < shard_count && newest != nullptr; ++shard) {
    const v1::ShardLeader* entry = LeaderEntry(*newest, shard);
    if (entry == nullptr || entry->voters().empty()) continue;
    const std::vector<uint32_t> voters(entry->voters().begin(), entry->voters().end());
    std::string zone;
    if (server::replication::ExposedToOneZone(voters, zones, &zone)) {
      exposed[zone].push_back(absl::StrCat(shard));
    }
  }
  std::vector<std::string> risks;
  for (auto& [zone, shards] : exposed) {
    const size_t count = shards.size();
    if (shards.size() > 20) {
      shards.resize(20);
      shards.push_back("...");
    }
    risks.push_back(absl::StrCat(count,
                                 " shard(s) would lose a majority of their replicas with zone ",
                                 zone.empty() ? "(none given)" : absl::StrCat("\"", zone, "\""),
                                 ": ", absl::StrJoin(shards, ", ")));
  }
  return risks;
}

void AddReplicatedShards(const Answered& answered, uint32_t shard_count, ClusterStatus* status) {
  const uint32_t majority = status->replication_factor / 2 + 1;
  status->zone_risks = ZoneRisks(answered, shard_count, status->zones);
  for (uint32_t shard = 0; shard < shard_count; ++shard) {
    ShardRow row;
    row.shard = shard;
    // The newest view of the shard any node holds.
    for (const auto& [address, map] : answered) {
      const v1::ShardLeader* entry = LeaderEntry(*map, shard);
      if (entry == nullptr || (entry->epoch() < row.epoch)) continue;
      if (entry->epoch() > row.epoch || row.node.empty()) {
        row.epoch = entry->epoch();
        row.node = NodeAddress(*map, entry->leader());
      }
    }
    const std::string where = absl::StrCat("shard ", shard, " (epoch ", row.epoch, ")");
    auto leader = answered.find(row.node);
    if (row.node.empty()) {
      status->problems.push_back(absl::StrCat(where, " has no leader"));
    } else if (leader == answered.end()) {
      status->problems.push_back(absl::StrCat(where, ": its leader ", row.node, " did not answer"));
    } else if (!AddReplicas(*leader->second, &row)) {
      status->problems.push_back(
          absl::StrCat(where, ": ", row.node, " does not report leading it yet"));
    } else {
      std::set<std::string> live = {row.node};
      for (const ReplicaRow& replica : row.replicas) {
        if (replica.live) live.insert(replica.address);
      }
      if (live.size() < majority) {
        status->problems.push_back(
            absl::StrCat(where, ": ", live.size(), " of ", status->replication_factor,
                         " replicas live, fewer than a majority (", majority, ")"));
      }
    }
    status->shards.push_back(std::move(row));
  }
}

// Lays `rows` out in columns two spaces apart; the last column is not
// padded.
std::string Columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string text;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&text, line, "\n");
  }
  return text;
}

std::string ReplicaText(const ReplicaRow& replica) {
  return absl::StrCat(replica.address, " last_seq=", replica.last_seq,
                      " applied_seq=", replica.applied_seq, " behind=", replica.behind,
                      replica.live ? " live" : " DOWN");
}

}  // namespace

std::vector<NodeAnswer> AskEveryNode(const std::string& endpoints,
                                     const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                     absl::Duration timeout) {
  std::vector<NodeAnswer> answers;
  for (absl::string_view endpoint : absl::StrSplit(endpoints, ',', absl::SkipWhitespace())) {
    absl::StatusOr<v1::TopologyResponse> first =
        AskOne(std::string(endpoint), credentials, timeout);
    if (!first.ok()) {
      answers.push_back({std::string(endpoint), std::move(first)});
      continue;
    }
    const v1::TopologyResponse map = *first;
    std::string self = NodeAddress(map, map.node_index());
    answers.push_back({self.empty() ? std::string(endpoint) : self, std::move(first)});
    std::vector<std::pair<std::string, std::future<absl::StatusOr<v1::TopologyResponse>>>> others;
    for (int i = 0; i < map.nodes_size(); ++i) {
      if (static_cast<uint32_t>(i) == map.node_index()) continue;
      others.emplace_back(
          map.nodes(i), std::async(std::launch::async, AskOne, map.nodes(i), credentials, timeout));
    }
    for (auto& [address, answer] : others) answers.push_back({address, answer.get()});
    break;
  }
  return answers;
}

ClusterStatus Summarize(const std::vector<NodeAnswer>& answers) {
  ClusterStatus status;
  Answered answered;
  const NodeAnswer* first = nullptr;
  for (const NodeAnswer& answer : answers) {
    if (!answer.topology.ok()) continue;
    answered[answer.address] = &*answer.topology;
    if (first == nullptr) first = &answer;
  }
  for (const NodeAnswer& answer : answers) {
    if (!answer.topology.ok() && answered.count(answer.address) == 0) {
      status.unreachable.push_back(
          absl::StrCat(answer.address, ": ", answer.topology.status().message()));
    }
  }
  const v1::TopologyResponse& map = *first->topology;
  status.nodes.assign(map.nodes().begin(), map.nodes().end());
  if (status.nodes.empty()) status.nodes = {first->address};
  status.replication_factor = std::max<uint32_t>(map.replication_factor(), 1);
  for (const auto& [address, node_map] : answered) {
    const auto& zones = node_map->zones();
    if (status.zones.size() < static_cast<size_t>(zones.size())) status.zones.resize(zones.size());
    for (int i = 0; i < zones.size(); ++i) {
      if (!zones[i].empty()) status.zones[i] = zones[i];
    }
  }
  for (const auto& [address, node_map] : answered) {
    if (!node_map->leaders().empty()) status.replicated = true;
  }
  if (status.replicated) {
    AddReplicatedShards(answered, map.shard_count(), &status);
    status.leads.assign(status.nodes.size(), 0);
    for (const ShardRow& shard : status.shards) {
      const auto node = std::find(status.nodes.begin(), status.nodes.end(), shard.node);
      if (node != status.nodes.end()) ++status.leads[node - status.nodes.begin()];
    }
    size_t led = 0, busiest = 0;
    for (size_t count : status.leads) {
      led += count;
      busiest = std::max(busiest, count);
    }
    if (led > 0) {
      const double even = static_cast<double>(led) / status.leads.size();
      status.leader_spread_percent = (busiest - even) / even * 100;
    }
  } else {
    AddStaticShards(answered, map.shard_count(), &status);
  }
  return status;
}

std::string RenderText(const ClusterStatus& status) {
  std::string text;
  std::vector<std::vector<std::string>> rows;
  if (status.replicated) {
    absl::StrAppend(&text, "replicated: ", status.nodes.size(), " nodes, ", status.shards.size(),
                    " shards, replication factor ", status.replication_factor, " (a majority is ",
                    status.replication_factor / 2 + 1, ")\n");
    std::map<std::string, std::vector<std::string>> by_zone;
    for (size_t i = 0; i < status.zones.size() && i < status.nodes.size(); ++i) {
      if (!status.zones[i].empty()) by_zone[status.zones[i]].push_back(status.nodes[i]);
    }
    if (!by_zone.empty()) {
      std::vector<std::string> zones;
      for (const auto& [zone, nodes] : by_zone) {
        zones.push_back(absl::StrCat(zone, " (", absl::StrJoin(nodes, ", "), ")"));
      }
      absl::StrAppend(&text, "zones: ", absl::StrJoin(zones, "; "), "\n");
    }
    for (const std::string& risk : status.zone_risks) {
      absl::StrAppend(&text, "zone risk: ", risk, "\n");
    }
    std::vector<std::string> leads;
    for (size_t i = 0; i < status.leads.size(); ++i) {
      leads.push_back(absl::StrCat(status.nodes[i], " ", status.leads[i]));
    }
    absl::StrAppend(&text, "shards led: ", absl::StrJoin(leads, ", "),
                    absl::StrFormat(" (the busiest leads %.1f%% above an even share)\n",
                                    status.leader_spread_percent));
    rows.push_back({"SHARD", "LEADER", "EPOCH", "REPLICAS (behind: entries behind the leader)"});
    for (const ShardRow& shard : status.shards) {
      std::vector<std::string> replicas;
      for (const ReplicaRow& replica : shard.replicas) replicas.push_back(ReplicaText(replica));
      std::string replica_text = absl::StrJoin(replicas, ", ");
      if (shard.node.empty()) {
        replica_text = "-";
      } else if (!shard.replicas_known) {
        replica_text = "unknown: the leader did not report them";
      }
      rows.push_back({absl::StrCat(shard.shard), shard.node.empty() ? "none" : shard.node,
                      absl::StrCat(shard.epoch), replica_text});
    }
  } else {
    if (status.nodes.size() == 1) {
      absl::StrAppend(&text, "not replicated: a single node owns all ", status.shards.size(),
                      " shards\n");
    } else {
      absl::StrAppend(&text, "not replicated: ", status.nodes.size(), " nodes, ",
                      status.shards.size(), " shards, each shard on one node only\n");
    }
    rows.push_back({"SHARD", "OWNER"});
    for (const ShardRow& shard : status.shards) {
      rows.push_back({absl::StrCat(shard.shard), shard.node});
    }
  }
  absl::StrAppend(&text, Columns(rows));
  for (const std::string& node : status.unreachable) {
    absl::StrAppend(&text, "did not answer: ", node, "\n");
  }
  if (!text.empty()) text.pop_back();
  return text;
}

std::string RenderJson(const ClusterStatus& status) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardRow& shard : status.shards) {
    nlohmann::json row = {{"shard", shard.shard}};
    if (!status.replicated) {
      row["owner"] = shard.node;
      shards.push_back(std::move(row));
      continue;
    }
    row["leader"] = shard.node.empty() ? nlohmann::json(nullptr) : nlohmann::json(shard.node);
    row["epoch"] = shard.epoch;
    nlohmann::json replicas = nullptr;
    if (shard.replicas_known) {
      replicas = nlohmann::json::array();
      for (const ReplicaRow& replica : shard.replicas) {
        replicas.push_back({{"address", replica.address},
                            {"last_epoch", replica.last_epoch},
                            {"last_seq", replica.last_seq},
                            {"applied_seq", replica.applied_seq},
                            {"behind", replica.behind},
                            {"live", replica.live}});
      }
    }
    row["replicas"] = std::move(replicas);
    shards.push_back(std::move(row));
  }
  return nlohmann::json{{"replicated", status.replicated},
                        {"replication_factor", status.replication_factor},
                        {"nodes", status.nodes},
                        {"zones", status.zones},
                        {"zone_risks", status.zone_risks},
                        {"shards_led", status.leads},
                        {"leader_spread_percent", status.leader_spread_percent},
                        {"shards", std::move(shards)},
                        {"unreachable", status.unreachable},
                        {"problems", status.problems}}
      .dump();
}

int RunClusterStatus(const std::string& endpoints,
                     const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                     absl::Duration timeout, bool json, std::ostream& out, std::ostream& err) {
  const std::vector<NodeAnswer> answers = AskEveryNode(endpoints, credentials, timeout);
  const bool any = std::any_of(answers.begin(), answers.end(),
                               [](const NodeAnswer& answer) { return answer.topology.ok(); });
  if (!any) {
    for (const NodeAnswer& answer : answers) {
      err << "dedupctl: " << absl::StatusCodeToString(answer.topology.status().code()) << ": "
          << answer.address
          << " did not answer for the topology: " << answer.topology.status().message() << "\n";
    }
    return kExitError;
  }
  const ClusterStatus status = Summarize(answers);
  out << (json ? RenderJson(status) : RenderText(status)) << "\n";
  for (const std::string& problem : status.problems) err << "dedupctl: " << problem << "\n";
  if (status.problems.empty()) return kExitOk;
  err << "dedupctl: the cluster is degraded: " << status.problems.size()
      << " shard(s) without a leader or a live majority\n";
  return kExitClusterDegraded;
}

}  // namespace dedup::ctl
