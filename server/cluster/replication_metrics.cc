#include "server/cluster/replication_metrics.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dedup::server::cluster {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

ClientMetric Value(MetricType type, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

}  // namespace

std::vector<MetricFamily> ReplicationMetrics::Collect() const {
  const std::vector<ShardView> views = replicator_->Views();
  const ReplicatorCounters counters = replicator_->Counters();
  MetricFamily factor{"dedup_replication_factor", "Copies of each shard.", MetricType::Gauge, {}};
  factor.metric.push_back(Value(MetricType::Gauge, replication_factor_));
  MetricFamily leader{"dedup_replication_leader",
                      "1 for the shards this node leads and serves, 0 for the others it holds.",
                      MetricType::Gauge,
                      {}};
  MetricFamily epoch{"dedup_replication_epoch",
                     "The shard's epoch as this node knows it; raised at every change of leader.",
                     MetricType::Gauge,
                     {}};
  MetricFamily without{"dedup_replication_without_leader_seconds",
                       "How long the shard has had no leader as this node sees it; 0 while it "
                       "has one.",
                       MetricType::Gauge,
                       {}};
  MetricFamily live{"dedup_replication_live_replicas",
                    "On the shard's leader: its replicas heard from within half a lease, the "
                    "leader included.",
                    MetricType::Gauge,
                    {}};
  MetricFamily lag{"dedup_replication_lag_entries",
                   "On the shard's leader: log entries a follower does not hold yet.",
                   MetricType::Gauge,
                   {}};
  MetricFamily learner{"dedup_replication_learner",
                       "1 while this node re-seeds the shard (its data directory was replaced) "
                       "and may not vote for it.",
                       MetricType::Gauge,
                       {}};
  MetricFamily voters{"dedup_replication_voters",
                      "Voters of the shard in its placement: replication_factor, one more while "
                      "a move's target has been promoted and its source not yet removed.",
                      MetricType::Gauge,
                      {}};
  MetricFamily moving{"dedup_replication_moving",
                      "1 while the shard moves from one node to another (docs/elastic.md).",
                      MetricType::Gauge,
                      {}};
  MetricFamily copied{"dedup_replication_move_copied_bytes",
                      "Bytes this node, leading a moving shard, has sent the move's target.",
                      MetricType::Gauge,
                      {}};
  for (const ShardView& view : views) {
    if (!view.replica) continue;
    const std::string shard = absl::StrCat(view.shard);
    voters.metric.push_back(
        Value(MetricType::Gauge, static_cast<double>(view.voters.size()), {{"shard", shard}}));
    moving.metric.push_back(
        Value(MetricType::Gauge, view.move_to >= 0 ? 1 : 0, {{"shard", shard}}));
    if (view.leading && view.move_to >= 0) {
      copied.metric.push_back(Value(MetricType::Gauge, static_cast<double>(view.move_copied_bytes),
                                    {{"shard", shard}, {"to", absl::StrCat(view.move_to)}}));
    }
    leader.metric.push_back(Value(MetricType::Gauge, view.leading ? 1 : 0, {{"shard", shard}}));
    epoch.metric.push_back(
        Value(MetricType::Gauge, static_cast<double>(view.epoch), {{"shard", shard}}));
    without.metric.push_back(
        Value(MetricType::Gauge, absl::ToDoubleSeconds(view.without_leader), {{"shard", shard}}));
    learner.metric.push_back(Value(MetricType::Gauge, view.learner ? 1 : 0, {{"shard", shard}}));
    if (!view.leading) continue;
    double live_count = 1;
    for (const ShardView::Follower& f : view.followers) {
      if (f.live) ++live_count;
      lag.metric.push_back(
          Value(MetricType::Gauge,
                static_cast<double>(view.last.seq > f.match_seq ? view.last.seq - f.match_seq : 0),
                {{"shard", shard}, {"follower", absl::StrCat(f.node)}}));
    }
    live.metric.push_back(Value(MetricType::Gauge, live_count, {{"shard", shard}}));
  }
  MetricFamily changes{"dedup_replication_leader_changes_total",
                       "Shards this node took over as leader since it started.",
                       MetricType::Counter,
                       {Value(MetricType::Counter, static_cast<double>(counters.leader_changes))}};
  MetricFamily fenced{"dedup_replication_fenced_appends_total",
                      "Appends this node refused because their leader's epoch was below one it "
                      "had promised: writes of a fenced old leader.",
                      MetricType::Counter,
                      {Value(MetricType::Counter, static_cast<double>(counters.fenced_appends))}};
  MetricFamily failed{"dedup_replication_elections_failed_total",
                      "Elections this node started that found no majority or lost the etcd "
                      "transaction.",
                      MetricType::Counter,
                      {Value(MetricType::Counter, static_cast<double>(counters.elections_lost))}};
  MetricFamily notices{
      "dedup_replication_handoff_notices_total",
      "Planned hand-offs told directly to the follower named in etcd: `sent` by this node "
      "as a leader handing a shard over, `stood` when this node, so told, stood for the "
      "shard at once instead of on its next read of etcd.",
      MetricType::Counter,
      {Value(MetricType::Counter, static_cast<double>(counters.handoff_notices_sent),
             {{"direction", "sent"}}),
       Value(MetricType::Counter, static_cast<double>(counters.handoff_notices_stood),
             {{"direction", "stood"}})}};
  MetricFamily calls{"dedup_replication_ship_calls_total",
                     "Replication calls this node sent a follower as a leader: a Ship with "
                     "the appends of every shard it leads there, or an Append of one shard "
                     "(heartbeats included).",
                     MetricType::Counter,
                     {}};
  MetricFamily entries{"dedup_replication_shipped_entries_total",
                       "Log entries this node sent a follower as a leader. Over the calls, "
                       "how many writes one round trip to the follower carries.",
                       MetricType::Counter,
                       {}};
  MetricFamily bytes{"dedup_replication_shipped_bytes_total",
                     "Bytes of appends this node sent a follower as a leader, as encoded "
                     "(heartbeats included).",
                     MetricType::Counter,
                     {}};
  MetricFamily entry_bytes{"dedup_replication_shipped_entry_bytes_total",
                           "Bytes of the logged writes within them (the entries' batches): "
                           "the rest of dedup_replication_shipped_bytes_total is the "
                           "protocol's own.",
                           MetricType::Counter,
                           {}};
  for (const auto& [node, shipped] : counters.shipped) {
    const std::string follower = absl::StrCat(node);
    calls.metric.push_back(
        Value(MetricType::Counter, static_cast<double>(shipped.calls), {{"follower", follower}}));
    entries.metric.push_back(
        Value(MetricType::Counter, static_cast<double>(shipped.entries), {{"follower", follower}}));
    bytes.metric.push_back(
        Value(MetricType::Counter, static_cast<double>(shipped.bytes), {{"follower", follower}}));
    entry_bytes.metric.push_back(Value(
        MetricType::Counter, static_cast<double>(shipped.entry_bytes), {{"follower", follower}}));
  }
  return {std::move(factor), std::move(leader),     std::move(epoch),   std::move(without),
          std::move(live),   std::move(lag),        std::move(learner), std::move(voters),
          std::move(moving), std::move(copied),     std::move(changes), std::move(fenced),
          std::move(failed), std::move(notices),    std::move(calls),   std::move(entries),
          std::move(bytes),  std::move(entry_bytes)};
}

}  // namespace dedup::server::cluster
