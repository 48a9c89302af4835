#include "tests/blackbox/replicated_cluster.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "tests/blackbox/placement.h"

namespace dedup::blackbox {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);

// A channel that reconnects within ~100 ms of a node's return: gRPC's
// default backoff would wait out seconds after each restart.
std::unique_ptr<v1::Dedup::Stub> QuickReconnectStub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  return v1::Dedup::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

std::string LastLines(const std::string& text, int lines) {
  std::vector<absl::string_view> all = absl::StrSplit(text, '\n');
  if (static_cast<int>(all.size()) > lines) all.erase(all.begin(), all.end() - lines);
  return absl::StrJoin(all, "\n");
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReplicatedCluster>> ReplicatedCluster::Start(
    const std::string& work_dir, const ReplicatedClusterOptions& options) {
  if (options.initial_nodes < 0 || options.initial_nodes > options.nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "initial_nodes ", options.initial_nodes, " is not within 0..nodes (", options.nodes, ")"));
  }
  std::unique_ptr<ReplicatedCluster> cluster(new ReplicatedCluster(work_dir, options));
  if (options.replication_factor > 0) {
    std::filesystem::create_directories(work_dir + "/etcd");
    absl::StatusOr<std::unique_ptr<test::EtcdProcess>> etcd =
        test::EtcdProcess::Start(work_dir + "/etcd", nullptr,
                                 options.network != nullptr ? NetworkLab::EtcdHost() : "127.0.0.1");
    if (!etcd.ok()) return etcd.status();
    cluster->etcd_ = std::move(*etcd);
  }
  if (options.network != nullptr && options.network->nodes() < options.nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the network lab has room for ", options.network->nodes(), " nodes, not ", options.nodes));
  }
  std::vector<std::string> addresses;
  if (options.network != nullptr) {
    // Each node has an address of its own, so they can share a port.
    for (int node = 0; node < options.nodes; ++node) {
      addresses.push_back(
          absl::StrCat(options.network->NodeHost(node), ":", NetworkLab::kNodePort));
    }
  } else {
    for (int port : FreePorts(options.nodes)) addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  for (const std::string& address : addresses) {
    cluster->addresses_.push_back(address);
    cluster->stubs_.push_back(QuickReconnectStub(address));
  }
  cluster->nodes_.resize(cluster->addresses_.size());
  std::vector<int> nodes;
  for (int node = 0; node < cluster->initial_nodes(); ++node) nodes.push_back(node);
  if (absl::Status started = cluster->StartNodes(nodes); !started.ok()) return started;
  return cluster;
}

ReplicatedCluster::~ReplicatedCluster() {
  for (int node = 0; node < size(); ++node) {
    if (running(node)) KillNode(node);
  }
}

std::string ReplicatedCluster::Endpoints() const { return absl::StrJoin(addresses_, ","); }

std::string ReplicatedCluster::Endpoints(int count) const {
  return absl::StrJoin(addresses_.begin(), addresses_.begin() + std::clamp(count, 0, size()), ",");
}

int ReplicatedCluster::initial_nodes() const {
  return options_.initial_nodes > 0 ? options_.initial_nodes : size();
}

std::string ReplicatedCluster::DataDir(int node) const {
  return absl::StrCat(work_dir_, "/node-", node, "-data");
}

std::vector<std::string> ReplicatedCluster::FlagsOf(int node) const {
  std::vector<std::string> flags = {
      "--listen=" + addresses_[node],
      "--metrics_listen=off",
      "--data_dir=" + DataDir(node),
      "--durability=" + options_.durability,
      "--cluster_nodes=" + Endpoints(std::max(initial_nodes(), node + 1)),
      absl::StrCat("--node_index=", node)};
  // A lab's addresses are not loopback ones; nothing outside the lab can
  // reach them.
  if (options_.network != nullptr) flags.push_back("--insecure");
  if (options_.shards > 0) flags.push_back(absl::StrCat("--shards=", options_.shards));
  if (options_.replication_factor > 0) {
    flags.insert(flags.end(), {absl::StrCat("--replication_factor=", options_.replication_factor),
                               "--etcd_endpoints=" + etcd_->endpoint(),
                               "--cluster_name=" + options_.cluster_name,
                               "--leader_lease=" + absl::FormatDuration(options_.leader_lease)});
  }
  flags.insert(flags.end(), options_.extra_flags.begin(), options_.extra_flags.end());
  if (auto own = options_.node_flags.find(node); own != options_.node_flags.end()) {
    flags.insert(flags.end(), own->second.begin(), own->second.end());
  }
  return flags;
}

absl::Status ReplicatedCluster::StartNodes(const std::vector<int>& nodes) {
  for (int node : nodes) {
    Node& n = nodes_[node];
    if (n.process != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("node ", node, " is already running"));
    }
    n.log_path = absl::StrCat(work_dir_, "/node-", node, "-run-", ++n.runs, ".log");
    absl::StatusOr<std::unique_ptr<DedupdProcess>> process = DedupdProcess::Spawn(
        FlagsOf(node), n.log_path,
        options_.network != nullptr ? options_.network->NodeNamespace(node) : "");
    if (!process.ok()) return process.status();
    n.process = std::move(*process);
    n.paused = false;
  }
  const absl::Time give_up = absl::Now() + kStartTimeout;
  std::vector<int> waiting = nodes;
  while (!waiting.empty()) {
    const int node = waiting.back();
    Node& n = nodes_[node];
    if (std::optional<ExitStatus> exited = n.process->WaitForExit(std::chrono::milliseconds(0))) {
      n.process.reset();
      return absl::FailedPreconditionError(
          absl::StrCat("node ", node, " (", addresses_[node], ") ", Describe(*exited),
                       " before serving. Its output:\n", Output(node)));
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    v1::TopologyResponse topology;
    if (stubs_[node]->Topology(&context, v1::TopologyRequest(), &topology).ok()) {
      waiting.pop_back();
      continue;
    }
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("node ", node, " (", addresses_[node], ") did not answer Topology within ",
                       absl::FormatDuration(kStartTimeout), ". Its output:\n", Output(node)));
    }
    absl::SleepFor(kPollInterval);
  }
  return absl::OkStatus();
}

ExitStatus ReplicatedCluster::KillNode(int node) {
  Node& n = nodes_[node];
  const ExitStatus status = n.process->Kill();
  n.process.reset();
  n.paused = false;
  return status;
}

absl::StatusOr<ExitStatus> ReplicatedCluster::StopNode(int node, absl::Duration timeout) {
  Node& n = nodes_[node];
  if (n.paused) ResumeNode(node);
  absl::StatusOr<ExitStatus> status =
      n.process->Terminate(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  n.process.reset();
  return status;
}

absl::Status ReplicatedCluster::RestartNode(int node) {
  absl::StatusOr<ExitStatus> stopped = StopNode(node);
  if (!stopped.ok()) return stopped.status();
  if (*stopped != ExitStatus::Exited(0)) {
    return absl::InternalError(absl::StrCat("node ", node, " ", Describe(*stopped),
                                            " on SIGTERM. Its output:\n", Output(node)));
  }
  return StartNode(node);
}

namespace {

// Whether every thread of `pid` has stopped: kill() returns once SIGSTOP
// is queued, and a thread that is running then may still answer a call.
bool AllThreadsStopped(pid_t pid) {
  std::error_code error;
  const std::filesystem::path tasks = absl::StrCat("/proc/", pid, "/task");
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    const std::string stat = ReadFile((task.path() / "stat").string());
    // The state follows the command name in parentheses, which may
    // itself hold spaces or parentheses.
    const size_t end = stat.rfind(')');
    if (end == std::string::npos || end + 2 >= stat.size()) return false;
    const char state = stat[end + 2];
    if (state != 'T' && state != 't') return false;
  }
  return !error;
}

}  // namespace

void ReplicatedCluster::PauseNode(int node) {
  const pid_t pid = nodes_[node].process->pid();
  kill(pid, SIGSTOP);
  nodes_[node].paused = true;
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!AllThreadsStopped(pid) && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
}

void ReplicatedCluster::ResumeNode(int node) {
  kill(nodes_[node].process->pid(), SIGCONT);
  nodes_[node].paused = false;
}

absl::Status ReplicatedCluster::WipeNode(int node) {
  if (running(node)) {
    return absl::FailedPreconditionError(absl::StrCat("node ", node, " is running"));
  }
  std::error_code error;
  std::filesystem::remove_all(DataDir(node), error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot delete ", DataDir(node), ": ", error.message()));
  }
  return absl::OkStatus();
}

bool ReplicatedCluster::running(int node) const { return nodes_[node].process != nullptr; }

bool ReplicatedCluster::paused(int node) const { return nodes_[node].paused; }

std::string ReplicatedCluster::Output(int node) const { return ReadFile(nodes_[node].log_path); }

std::string ReplicatedCluster::OutputTails(int lines) const {
  std::string tails;
  for (int node = 0; node < size(); ++node) {
    absl::StrAppend(&tails, "--- node ", node, " (", addresses_[node], ", ",
                    running(node) ? (paused(node) ? "paused" : "running") : "down", "), run ",
                    nodes_[node].runs, ":\n", LastLines(Output(node), lines), "\n");
  }
  return tails;
}

TopologyAnswers ReplicatedCluster::AskTopology(absl::Duration timeout) const {
  const size_t n = stubs_.size();
  const v1::TopologyRequest request;
  std::unique_ptr<grpc::ClientContext[]> contexts(new grpc::ClientContext[n]);
  std::vector<v1::TopologyResponse> responses(n);
  std::vector<grpc::Status> statuses(n);
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t node = 0; node < n; ++node) {
    contexts[node].set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    stubs_[node]->async()->Topology(&contexts[node], &request, &responses[node],
                                    [&statuses, &pending, node](grpc::Status status) {
                                      statuses[node] = std::move(status);
                                      pending.DecrementCount();
                                    });
  }
  pending.Wait();
  TopologyAnswers answers(n);
  for (size_t node = 0; node < n; ++node) {
    if (statuses[node].ok()) answers[node] = std::move(responses[node]);
  }
  return answers;
}

std::vector<Leadership> ReplicatedCluster::Leaders() const {
  return LeadersOf(AskTopology(), options_.shards);
}

absl::StatusOr<std::vector<Leadership>> ReplicatedCluster::WaitForAllShardsLed(
    absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  for (;;) {
    std::vector<Leadership> leaders = Leaders();
    bool all_led = true;
    for (const Leadership& leader : leaders) all_led = all_led && leader.node >= 0;
    if (all_led) return leaders;
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat("not every shard had a leader within ",
                                                      absl::FormatDuration(timeout), ": ",
                                                      Describe(leaders), "\n", OutputTails()));
    }
    absl::SleepFor(kPollInterval);
  }
}

std::optional<std::string> ReplicatedCluster::ReplicationGap(const TopologyAnswers& answers,
                                                             const std::vector<Leadership>& leaders,
                                                             uint64_t max_behind) const {
  for (uint32_t shard = 0; shard < leaders.size(); ++shard) {
    if (leaders[shard].node < 0) return absl::StrCat("shard ", shard, " has no leader");
    if (options_.replication_factor == 0) continue;
    const v1::TopologyResponse& answer = *answers[leaders[shard].node];
    const auto led_it = std::find_if(answer.leaders().begin(), answer.leaders().end(),
                                     [&](const v1::ShardLeader& l) { return l.shard() == shard; });
    if (led_it == answer.leaders().end()) {
      return absl::StrCat("node ", leaders[shard].node, " lists no shard ", shard);
    }
    const v1::ShardLeader& led = *led_it;
    if (led.replicas_size() != static_cast<int>(options_.replication_factor)) {
      return absl::StrCat("shard ", shard, " lists ", led.replicas_size(),
                          " replicas: ", led.ShortDebugString());
    }
    for (const v1::ReplicaStatus& replica : led.replicas()) {
      if (!replica.live() || replica.behind() > max_behind) {
        return absl::StrCat("shard ", shard, " replica on node ", replica.node(),
                            " is not caught up: ", replica.ShortDebugString());
      }
    }
  }
  return std::nullopt;
}

absl::Status ReplicatedCluster::WaitForFullReplication(absl::Duration timeout,
                                                       uint64_t max_behind) {
  const absl::Time give_up = absl::Now() + timeout;
  for (;;) {
    const TopologyAnswers answers = AskTopology();
    const std::optional<std::string> gap =
        ReplicationGap(answers, LeadersOf(answers, options_.shards), max_behind);
    if (!gap.has_value()) return absl::OkStatus();
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat("replicas not complete within ",
                                                      absl::FormatDuration(timeout), ": ", *gap,
                                                      "\n", OutputTails()));
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::Status ReplicatedCluster::WaitForLive(int node, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  for (;;) {
    const TopologyAnswers answers = AskTopology();
    std::optional<std::string> missing;
    int answered = 0;
    for (size_t i = 0; i < answers.size() && !missing.has_value(); ++i) {
      if (!answers[i].has_value()) continue;
      ++answered;
      const v1::TopologyResponse& answer = *answers[i];
      const auto& live = answer.live_nodes();
      if (answer.nodes_size() <= node || answer.nodes(node) != addresses_[node]) {
        missing = absl::StrCat("node ", i, " does not know node ", node, " at ", addresses_[node],
                               ": its nodes are ", absl::StrJoin(answer.nodes(), ","));
      } else if (std::find(live.begin(), live.end(), static_cast<uint32_t>(node)) == live.end()) {
        missing = absl::StrCat("node ", i, " does not list node ", node,
                               " as live: its live nodes are ", absl::StrJoin(live, ","));
      }
    }
    if (answered == 0) missing = "no node answered Topology";
    if (!missing.has_value()) return absl::OkStatus();
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat("node ", node, " was not live within ",
                                                      absl::FormatDuration(timeout), ": ", *missing,
                                                      "\n", OutputTails()));
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::StatusOr<v1::TopologyResponse> ReplicatedCluster::WaitForSettledPlacement(
    absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  for (;;) {
    const TopologyAnswers answers = AskTopology();
    const std::optional<v1::TopologyResponse> placement = NewestPlacement(answers);
    std::optional<std::string> unsettled;
    if (!placement.has_value()) {
      unsettled = "no node answered Topology";
    } else {
      unsettled = UnsettledPlacement(*placement, options_.replication_factor);
    }
    const std::vector<Leadership> leaders = LeadersOf(answers, options_.shards);
    for (uint32_t shard = 0; shard < leaders.size() && !unsettled.has_value(); ++shard) {
      const v1::ShardLeader* placed = ShardIn(*placement, shard);
      if (placed == nullptr) {
        unsettled = absl::StrCat("the placement lists no shard ", shard);
      } else if (leaders[shard].node < 0) {
        unsettled = absl::StrCat("shard ", shard, " has no leader");
      } else if (!VotesFor(*placed, leaders[shard].node)) {
        unsettled = absl::StrCat("shard ", shard, " is led by node ", leaders[shard].node,
                                 ", which is not one of its voters");
      }
    }
    if (!unsettled.has_value()) return *placement;
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the placement did not settle within ", absl::FormatDuration(timeout), ": ", *unsettled,
          "\nleaders: ", Describe(leaders), "\nnewest placement: ",
          placement.has_value() ? DescribePlacement(*placement) : "none", "\n", OutputTails()));
    }
    absl::SleepFor(kPollInterval);
  }
}

int ReplicatedCluster::BusiestLeader(const std::vector<Leadership>& leaders) {
  std::map<int, int> led;
  for (const Leadership& leader : leaders) {
    if (leader.node >= 0) ++led[leader.node];
  }
  int busiest = -1;
  for (const auto& [node, count] : led) {
    if (busiest < 0 || count > led[busiest]) busiest = node;
  }
  return busiest;
}

}  // namespace dedup::blackbox
