#ifndef DEDUP_SERVER_CLUSTER_REPLICATION_METRICS_H_
#define DEDUP_SERVER_CLUSTER_REPLICATION_METRICS_H_

// The replication metrics of docs/replication.md §6, read from the
// replicator at each scrape:
//   dedup_replication_factor                       copies of each shard
//   dedup_replication_leader{shard}                1 where this node leads
//   dedup_replication_epoch{shard}                 the shard's epoch as known here
//   dedup_replication_without_leader_seconds{shard}  how long it has had none (0: it has one)
//   dedup_replication_live_replicas{shard}         on its leader: replicas heard from lately
//   dedup_replication_lag_entries{shard,follower}  on its leader: entries a follower lacks
//   dedup_replication_learner{shard}               1 while this node re-seeds the shard
//   dedup_replication_leader_changes_total         shards this node took over
//   dedup_replication_fenced_appends_total         appends refused for a lower epoch
//   dedup_replication_elections_failed_total       elections that found no majority
//   dedup_replication_handoff_notices_total{direction}  planned hand-offs told directly
//   dedup_replication_ship_calls_total{follower}   replication calls sent to a follower
//   dedup_replication_shipped_entries_total{follower}  log entries in them

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/cluster/replicator.h"

namespace dedup::server::cluster {

class ReplicationMetrics final : public prometheus::Collectable {
 public:
  // `replicator` must outlive the collector.
  explicit ReplicationMetrics(Replicator* replicator, uint32_t replication_factor)
      : replicator_(replicator), replication_factor_(replication_factor) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Replicator* const replicator_;
  const uint32_t replication_factor_;
};

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_REPLICATION_METRICS_H_
