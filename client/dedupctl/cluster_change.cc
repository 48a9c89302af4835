#include "cluster_change.h"

#include <algorithm>
#include <functional>
#include <future>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "exit_codes.h"
#include "grpcpp/create_channel.h"

namespace dedup::ctl {
namespace {

// A move that failed this often is not planned again by this command.
constexpr int kMaxAttempts = 3;

bool Holds(const std::vector<uint32_t>& nodes, uint32_t node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

std::string Mib(uint64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

std::string NodeName(const PlacementView& view, uint32_t node) {
  return node < view.nodes.size() && !view.nodes[node].empty()
             ? absl::StrCat(view.nodes[node], " (node ", node, ")")
             : absl::StrCat("node ", node);
}

std::optional<PlacementView> Fetch(const ChangeContext& context) {
  return MergeAnswers(AskEveryNode(context.endpoints, context.credentials,
                                   std::min(context.call_timeout, absl::Seconds(2))));
}

// Calls `call` on the live nodes in turn until one answers.
grpc::Status CallAnyNode(
    const ChangeContext& context, const PlacementView& view,
    const std::function<grpc::Status(v1::Dedup::Stub&, grpc::ClientContext&)>& call) {
  grpc::Status status(grpc::StatusCode::UNAVAILABLE, "no live node to ask");
  for (uint32_t node : view.live) {
    if (node >= view.nodes.size() || view.nodes[node].empty()) continue;
    auto stub = v1::Dedup::NewStub(grpc::CreateChannel(
        view.nodes[node],
        context.credentials != nullptr ? context.credentials : grpc::InsecureChannelCredentials()));
    grpc::ClientContext call_context;
    call_context.set_deadline(absl::ToChronoTime(absl::Now() + context.call_timeout));
    status = call(*stub, call_context);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
        status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return status;
    }
  }
  return status;
}

grpc::Status StartMove(const ChangeContext& context, const PlacementView& view,
                       const PlannedMove& move) {
  v1::MoveShardRequest request;
  request.set_shard(move.shard);
  request.set_from(move.from);
  request.set_to(move.to);
  return CallAnyNode(context, view, [&](v1::Dedup::Stub& stub, grpc::ClientContext& call) {
    v1::MoveShardResponse response;
    return stub.MoveShard(&call, request, &response);
  });
}

grpc::Status SetDraining(const ChangeContext& context, const PlacementView& view, uint32_t node,
                         bool draining) {
  v1::SetDrainingRequest request;
  request.set_node(node);
  request.set_draining(draining);
  return CallAnyNode(context, view, [&](v1::Dedup::Stub& stub, grpc::ClientContext& call) {
    v1::SetDrainingResponse response;
    return stub.SetDraining(&call, request, &response);
  });
}

// Waits for an answer from some node; nullopt (and the reason on err)
// past the deadline.
std::optional<PlacementView> FetchUntil(const ChangeContext& context, absl::Time deadline) {
  while (true) {
    std::optional<PlacementView> view = Fetch(context);
    if (view.has_value()) return view;
    if (absl::Now() > deadline) {
      *context.err << "dedupctl: no node of " << context.endpoints
                   << " answered for the topology\n";
      return std::nullopt;
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
}

bool Replicated(const ChangeContext& context, const PlacementView& view) {
  if (view.replication_factor > 1 && !view.shards.empty()) return true;
  *context.err << "dedupctl: this cluster is not replicated (replication_factor "
               << view.replication_factor
               << "): its shards are placed by the static rule and cannot move; only a "
                  "replicated cluster (replication_factor 2 or more, with etcd) grows or shrinks "
                  "online\n";
  return false;
}

// What the plan does about zones: keeps each shard's replicas in distinct
// zones, or warns that there are too few zones for that.
std::string ZoneRule(const PlacementView& view) {
  std::set<std::string> zones;
  for (const auto& [node, count] : view.VoterCounts()) {
    zones.insert(node < view.zones.size() ? view.zones[node] : "");
  }
  const bool zoned = !(zones.size() == 1 && zones.begin()->empty());
  if (!zoned) return "zones: none given; replicas are placed without regard to zones";
  if (zones.size() < view.replication_factor) {
    return absl::StrCat("warning: ", zones.size(), " zones for ", view.replication_factor,
                        " replicas of each shard: the loss of one zone can take a majority of some "
                        "shards with it");
  }
  return absl::StrCat("zones: ", zones.size(), "; every shard's replicas go to distinct zones");
}

// Starts planned moves and watches them until `done` holds of a view with
// nothing moving and nothing left to plan, printing progress (first what
// the plans do about zones, with `describe_zones`). Returns the exit code.
int Drive(const ChangeContext& context,
          const std::function<std::vector<PlannedMove>(const PlacementView&)>& planner,
          const std::function<bool(const PlacementView&)>& done, const std::string& goal,
          int max_attempts = kMaxAttempts, bool describe_zones = true) {
  struct Running {
    PlannedMove move;
    uint64_t copied = 0;
    absl::Time started;
    bool seen = false;
  };
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + context.wait;
  std::map<uint32_t, Running> running;  // By shard.
  std::map<uint32_t, int> failures;     // By shard.
  uint64_t moved = 0, copied_done = 0;
  absl::Time last_report = absl::InfinitePast();
  std::ostream& out = *context.out;
  std::ostream& err = *context.err;
  for (bool first = true;; first = false) {
    std::optional<PlacementView> view = FetchUntil(context, deadline);
    if (!view.has_value()) return kExitError;
    if (first && describe_zones) out << ZoneRule(*view) << "\n";
    const absl::Time now = absl::Now();
    for (auto it = running.begin(); it != running.end();) {
      Running& r = it->second;
      const PlacementView::Shard& shard = view->shards[r.move.shard];
      if (shard.moving && shard.move_to == r.move.to) {
        r.seen = true;
        r.copied = std::max(r.copied, shard.copied_bytes);
        ++it;
        continue;
      }
      const bool arrived = Holds(shard.voters, r.move.to) && !Holds(shard.voters, r.move.from);
      if (!arrived && !r.seen && now - r.started < absl::Seconds(5)) {
        ++it;  // This answer may predate the move.
        continue;
      }
      if (arrived) {
        ++moved;
        copied_done += r.copied;
        out << "shard " << r.move.shard << " moved from " << NodeName(*view, r.move.from) << " to "
            << NodeName(*view, r.move.to) << "\n";
      } else {
        ++failures[r.move.shard];
        err << "dedupctl: the move of shard " << r.move.shard << " to "
            << NodeName(*view, r.move.to) << " was rolled back (its target went away?)\n";
      }
      it = running.erase(it);
    }
    // A move started here that this view does not show yet (the nodes read
    // etcd once a pass) is planned around as the cluster will soon show it.
    for (const auto& [s, r] : running) {
      PlacementView::Shard& shard = view->shards[s];
      if (shard.moving) continue;
      shard.moving = true;
      shard.move_from = r.move.from;
      shard.move_to = r.move.to;
    }
    // Moves under way, in all and per node, ours or not.
    size_t under_way = running.size();
    std::map<uint32_t, size_t> busy;
    for (const auto& [s, r] : running) {
      ++busy[r.move.from];
      ++busy[r.move.to];
    }
    for (uint32_t s = 0; s < view->shards.size(); ++s) {
      const PlacementView::Shard& shard = view->shards[s];
      if (!shard.moving || running.count(s)) continue;
      ++under_way;
      ++busy[shard.move_from];
      ++busy[shard.move_to];
    }
    std::vector<PlannedMove> plan;
    for (const PlannedMove& move : planner(*view)) {
      if (running.count(move.shard) == 0 && failures[move.shard] < max_attempts) {
        plan.push_back(move);
      }
    }
    const bool moving = std::any_of(view->shards.begin(), view->shards.end(),
                                    [](const PlacementView::Shard& s) { return s.moving; });
    if (running.empty() && plan.empty() && !moving) {
      if (done(*view)) {
        out << goal << ": done, " << moved << " shard(s) moved, " << Mib(copied_done)
            << " copied, in " << absl::FormatDuration(absl::Trunc(now - start, absl::Seconds(1)))
            << "\n";
        return kExitOk;
      }
      if (!failures.empty()) {
        err << "dedupctl: " << goal
            << ": not reached; a move was refused or rolled back (see above)\n";
        return kExitError;
      }
    }
    uint64_t waiting = 0;  // Planned, not started yet.
    std::vector<PlannedMove> starting;
    for (const PlannedMove& move : plan) {
      if (under_way >= context.parallel_moves || busy[move.from] >= context.parallel_moves ||
          busy[move.to] >= context.parallel_moves) {
        ++waiting;
        continue;
      }
      starting.push_back(move);
      ++under_way;
      ++busy[move.from];
      ++busy[move.to];
    }
    // All at once: each start is a few etcd round trips on the node asked,
    // and one after the other they took longer than the small moves of a
    // new cluster themselves. (Where no thread can be had, a start runs
    // when its answer is asked for.)
    std::vector<std::future<grpc::Status>> started;
    started.reserve(starting.size());
    for (const PlannedMove& move : starting) {
      started.push_back(std::async(std::launch::async | std::launch::deferred, StartMove,
                                   std::cref(context), std::cref(*view), std::cref(move)));
    }
    for (size_t i = 0; i < starting.size(); ++i) {
      const PlannedMove& move = starting[i];
      const grpc::Status status = started[i].get();
      if (status.ok()) {
        out << "moving shard " << move.shard << " from " << NodeName(*view, move.from) << " to "
            << NodeName(*view, move.to) << "\n";
        running[move.shard] = {move, 0, absl::Now(), false};
      } else if (status.error_code() != grpc::StatusCode::ABORTED &&
                 status.error_code() != grpc::StatusCode::UNAVAILABLE) {
        ++failures[move.shard];
        err << "dedupctl: cannot move shard " << move.shard << ": " << status.error_message()
            << "\n";
      }
    }
    if (now - last_report >= absl::Seconds(2)) {
      last_report = now;
      uint64_t copied = copied_done;
      for (const auto& [s, r] : running) copied += r.copied;
      const uint64_t total = moved + running.size() + waiting;
      std::string eta = "unknown";
      if (moved > 0 && total > moved) {
        eta = absl::FormatDuration(absl::Trunc(
            (now - start) / static_cast<double>(moved) * (total - moved), absl::Seconds(1)));
      }
      out << goal << ": moved " << moved << " of " << std::max(total, moved) << " shard(s), "
          << running.size() << " moving, " << Mib(copied) << " copied, ETA " << eta << "\n";
    }
    if (now > deadline) {
      err << "dedupctl: " << goal
          << ": not done within --wait=" << absl::FormatDuration(context.wait)
          << "; moves under way continue on the cluster\n";
      return kExitError;
    }
    out.flush();
    // A small move takes well under a second: while moves run, their end is
    // looked for often, so that the next starts soon after.
    absl::SleepFor(running.empty() ? absl::Milliseconds(500) : absl::Milliseconds(150));
  }
}

bool Balanced(const PlacementView& view) {
  for (const PlacementView::Shard& shard : view.shards) {
    if (!shard.learners.empty() || shard.moving) return false;
  }
  return PlanBalance(view).empty();
}

}  // namespace

int32_t PlacementView::IndexOf(const std::string& address) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] == address) return static_cast<int32_t>(i);
  }
  return -1;
}

std::map<uint32_t, uint32_t> PlacementView::VoterCounts() const {
  std::map<uint32_t, uint32_t> counts;
  for (uint32_t node : live) {
    if (draining.count(node) == 0) counts[node] = 0;
  }
  for (const Shard& shard : shards) {
    for (uint32_t node : shard.voters) {
      if (counts.count(node)) ++counts[node];
    }
  }
  return counts;
}

std::optional<PlacementView> MergeAnswers(const std::vector<NodeAnswer>& answers) {
  const v1::TopologyResponse* best = nullptr;
  for (const NodeAnswer& answer : answers) {
    if (!answer.topology.ok()) continue;
    if (best == nullptr || answer.topology->placement_revision() > best->placement_revision()) {
      best = &*answer.topology;
    }
  }
  if (best == nullptr) return std::nullopt;
  PlacementView view;
  view.replication_factor = std::max<uint32_t>(best->replication_factor(), 1);
  view.live.insert(best->live_nodes().begin(), best->live_nodes().end());
  view.draining.insert(best->draining_nodes().begin(), best->draining_nodes().end());
  for (const NodeAnswer& answer : answers) {
    if (!answer.topology.ok()) continue;
    const auto& nodes = answer.topology->nodes();
    if (view.nodes.size() < static_cast<size_t>(nodes.size())) view.nodes.resize(nodes.size());
    for (int i = 0; i < nodes.size(); ++i) {
      if (!nodes[i].empty()) view.nodes[i] = nodes[i];
    }
    const auto& zones = answer.topology->zones();
    if (view.zones.size() < static_cast<size_t>(zones.size())) view.zones.resize(zones.size());
    for (int i = 0; i < zones.size(); ++i) {
      if (!zones[i].empty()) view.zones[i] = zones[i];
    }
  }
  view.shards.resize(best->leaders_size());
  for (const v1::ShardLeader& entry : best->leaders()) {
    if (entry.shard() >= view.shards.size()) continue;
    PlacementView::Shard& shard = view.shards[entry.shard()];
    shard.voters.assign(entry.voters().begin(), entry.voters().end());
    shard.learners.assign(entry.learners().begin(), entry.learners().end());
    if (entry.has_move()) {
      shard.moving = true;
      shard.move_from = entry.move().from();
      shard.move_to = entry.move().to();
      shard.move_state = entry.move().state();
    }
  }
  for (const NodeAnswer& answer : answers) {
    if (!answer.topology.ok()) continue;
    for (const v1::ShardLeader& entry : answer.topology->leaders()) {
      if (entry.shard() >= view.shards.size()) continue;
      PlacementView::Shard& shard = view.shards[entry.shard()];
      if (entry.epoch() >= shard.epoch && entry.leader() >= 0) {
        shard.epoch = entry.epoch();
        shard.leader = entry.leader();
      }
      if (entry.has_move() && entry.move().progress_known() && shard.moving &&
          entry.move().to() == shard.move_to) {
        shard.copied_bytes = std::max(shard.copied_bytes, entry.move().copied_bytes());
      }
    }
  }
  return view;
}

std::vector<PlannedMove> PlanBalance(const PlacementView& view) {
  std::vector<server::replication::ShardPlacement> shards(view.shards.size());
  for (size_t s = 0; s < view.shards.size(); ++s) {
    const PlacementView::Shard& shard = view.shards[s];
    shards[s] = {shard.voters, shard.learners, shard.moving,
                 shard.moving ? static_cast<int64_t>(shard.move_from) : int64_t{-1},
                 shard.moving ? static_cast<int64_t>(shard.move_to) : int64_t{-1}};
  }
  std::set<uint32_t> eligible;
  for (const auto& [node, count] : view.VoterCounts()) eligible.insert(node);
  return server::replication::PlanBalance(shards, eligible, view.zones);
}

int RunRebalance(const ChangeContext& context) {
  std::optional<PlacementView> view = FetchUntil(context, absl::Now() + context.call_timeout);
  if (!view.has_value()) return kExitError;
  if (!Replicated(context, *view)) return kExitError;
  return Drive(context, PlanBalance, Balanced, "rebalance");
}

int RunAddNode(const ChangeContext& context, const std::string& address) {
  const absl::Time deadline = absl::Now() + context.wait;
  absl::Time last_report = absl::InfinitePast();
  while (true) {
    std::optional<PlacementView> view = FetchUntil(context, deadline);
    if (!view.has_value()) return kExitError;
    if (!Replicated(context, *view)) return kExitError;
    const int32_t node = view->IndexOf(address);
    if (node >= 0 && view->live.count(node)) {
      if (view->draining.count(node)) {
        const grpc::Status undrained = SetDraining(context, *view, node, false);
        if (!undrained.ok()) {
          *context.err << "dedupctl: cannot clear the draining mark of " << address << ": "
                       << undrained.error_message() << "\n";
          return kExitError;
        }
        // The nodes read the mark from etcd on their next tick; a plan made
        // before would leave the node out.
        *context.out << address << " was draining; it holds shards again\n";
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      *context.out << address << " is node " << node << " of the cluster; rebalancing\n";
      return RunRebalance(context);
    }
    if (absl::Now() > deadline) {
      *context.err << "dedupctl: " << address
                   << " has not joined the cluster: start dedupd there with this cluster's "
                      "etcd endpoints, cluster name and a --cluster_nodes list that gives it "
                      "this address\n";
      return kExitError;
    }
    if (absl::Now() - last_report > absl::Seconds(5)) {
      last_report = absl::Now();
      *context.out << "waiting for " << address << " to join the cluster\n";
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
}

int RunRemoveNode(const ChangeContext& context, const std::string& address) {
  std::optional<PlacementView> view = FetchUntil(context, absl::Now() + context.call_timeout);
  if (!view.has_value()) return kExitError;
  if (!Replicated(context, *view)) return kExitError;
  const int32_t node = view->IndexOf(address);
  if (node < 0) {
    *context.err << "dedupctl: " << address
                 << " is not a node of this cluster (nodes: " << absl::StrJoin(view->nodes, ", ")
                 << ")\n";
    return kExitError;
  }
  const uint32_t index = static_cast<uint32_t>(node);
  size_t remaining = 0;
  for (uint32_t other : view->live) {
    if (other != index && view->draining.count(other) == 0) ++remaining;
  }
  if (remaining < view->replication_factor) {
    *context.err << "dedupctl: refusing to remove " << address << ": " << remaining
                 << " live node(s) would be left for a replication factor of "
                 << view->replication_factor << ", so its shards would have nowhere to go and "
                 << "would be left with fewer replicas than a full set (a majority lost with "
                 << "one more node); add a node first\n";
    return kExitError;
  }
  const grpc::Status drained = SetDraining(context, *view, index, true);
  if (!drained.ok()) {
    *context.err << "dedupctl: cannot mark " << address << " draining: " << drained.error_message()
                 << "\n";
    return kExitError;
  }
  *context.out << "draining " << NodeName(*view, index) << "\n";
  // Plans are made from the nodes' answers: wait until they show the mark.
  for (const absl::Time until = absl::Now() + context.call_timeout; absl::Now() < until;) {
    std::optional<PlacementView> seen = Fetch(context);
    if (seen.has_value() && seen->draining.count(index)) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  auto empty = [index](const PlacementView& v) {
    for (const PlacementView::Shard& shard : v.shards) {
      if (Holds(shard.voters, index) || Holds(shard.learners, index)) return false;
    }
    return Balanced(v);
  };
  const int code = Drive(context, PlanBalance, empty, absl::StrCat("remove ", address));
  if (code == kExitOk) {
    *context.out << address << " holds no shard now; it can be stopped\n";
  }
  return code;
}

int RunMoveShard(const ChangeContext& context, uint32_t shard, const std::string& to,
                 const std::string& from) {
  std::optional<PlacementView> view = FetchUntil(context, absl::Now() + context.call_timeout);
  if (!view.has_value()) return kExitError;
  if (!Replicated(context, *view)) return kExitError;
  if (shard >= view->shards.size()) {
    *context.err << "dedupctl: no shard " << shard << ": the cluster has " << view->shards.size()
                 << "\n";
    return kExitError;
  }
  // A node started a moment ago is known to the others once they have read
  // its registration: it is waited for, a little.
  int32_t target = view->IndexOf(to);
  for (const absl::Time until = absl::Now() + std::min(context.wait, absl::Seconds(30));
       (target < 0 || view->live.count(static_cast<uint32_t>(target)) == 0) &&
       absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(300));
    std::optional<PlacementView> again = Fetch(context);
    if (again.has_value()) {
      view = std::move(again);
      target = view->IndexOf(to);
    }
  }
  if (target < 0) {
    *context.err << "dedupctl: " << to
                 << " is not a node of this cluster (nodes: " << absl::StrJoin(view->nodes, ", ")
                 << ")\n";
    return kExitError;
  }
  const PlacementView::Shard& entry = view->shards[shard];
  int32_t source = -1;
  if (!from.empty()) {
    source = view->IndexOf(from);
    if (source < 0) {
      *context.err << "dedupctl: " << from << " is not a node of this cluster\n";
      return kExitError;
    }
  } else {
    // The voter holding the most shards; a follower before the leader,
    // which would have to hand the shard over first.
    const std::map<uint32_t, uint32_t> counts = view->VoterCounts();
    for (uint32_t node : entry.voters) {
      auto load = [&](uint32_t n) {
        auto it = counts.find(n);
        return std::make_pair(it == counts.end() ? UINT32_MAX : it->second,
                              static_cast<int32_t>(n) != entry.leader);
      };
      if (source < 0 || load(node) > load(static_cast<uint32_t>(source))) {
        source = static_cast<int32_t>(node);
      }
    }
  }
  const PlannedMove move{shard, static_cast<uint32_t>(source), static_cast<uint32_t>(target)};
  auto arrived = [&](const PlacementView& v) {
    return Holds(v.shards[shard].voters, move.to) && !Holds(v.shards[shard].voters, move.from);
  };
  auto planner = [&](const PlacementView& v) {
    std::vector<PlannedMove> plan;
    if (!arrived(v) && !v.shards[shard].moving) plan.push_back(move);
    return plan;
  };
  // One attempt: a refusal or a rollback is the answer.
  return Drive(context, planner, arrived, absl::StrCat("move shard ", shard), 1,
               /*describe_zones=*/false);
}

}  // namespace dedup::ctl
