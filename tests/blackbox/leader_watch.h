#ifndef DEDUP_TESTS_BLACKBOX_LEADER_WATCH_H_
#define DEDUP_TESTS_BLACKBOX_LEADER_WATCH_H_

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tests/blackbox/replicated_cluster.h"
#include "tests/blackbox/shard_leaders.h"

namespace dedup::blackbox {

// Asks a cluster's nodes for Topology in the background, from construction
// until Stop, to measure how long each shard had no leader (a failover's
// cost, as clients see it) and to catch two nodes claiming one shard at one
// epoch. A paused node makes a round last the ask's timeout (250 ms), so
// gaps are measured to about that.
//
// Construct and Stop on one thread; the results are read after Stop.
class LeaderWatch {
 public:
  explicit LeaderWatch(const ReplicatedCluster* cluster,
                       absl::Duration interval = absl::Milliseconds(25));
  // Stops, if Stop was not called.
  ~LeaderWatch();

  LeaderWatch(const LeaderWatch&) = delete;
  LeaderWatch& operator=(const LeaderWatch&) = delete;

  // Stops asking and waits for the last round. Idempotent.
  void Stop();

  // After Stop.
  const LeaderlessTimes& times() const { return times_; }
  // Every distinct LeadershipConflicts line seen.
  const std::set<std::string>& conflicts() const { return conflicts_; }

 private:
  void Run();

  const ReplicatedCluster* const cluster_;
  const absl::Duration interval_;
  absl::Notification stop_;
  // Written only by the thread until it is joined.
  LeaderlessTimes times_;
  std::set<std::string> conflicts_;
  std::thread thread_;  // Last: starts once the rest is built.
};

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_LEADER_WATCH_H_
