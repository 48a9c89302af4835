#ifndef DEDUP_TESTS_BLACKBOX_SHARD_LEADERS_H_
#define DEDUP_TESTS_BLACKBOX_SHARD_LEADERS_H_

// Who leads each shard, as a test reads it from the nodes' Topology
// answers (proto/dedup/v1/dedup.proto, TopologyResponse), and how long each
// shard went without a leader.
//
// A node's answer names, per shard, the leader and epoch it knows; only a
// leader knows for sure that it leads. So a shard is led by node i when i
// itself answered naming itself leader at the newest epoch any answer names
// for the shard. A leader that died, hangs or has not been elected yet
// leaves the shard unled; so does a newer epoch whose leader has not
// answered yet.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "dedup/client/clock.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup::blackbox {

// Who leads one shard.
struct Leadership {
  int node = -1;  // -1: no leader answers for the shard.
  uint64_t epoch = 0;

  bool operator==(const Leadership& other) const {
    return node == other.node && epoch == other.epoch;
  }
};

// "node 1 epoch 3", or "no leader"; lets gtest print a Leadership.
void PrintTo(const Leadership& leadership, std::ostream* os);

// One answer per node, in node order; nullopt for a node that did not
// answer. In a statically sharded cluster (answers without `leaders`) the
// owner of shard s, node s mod len(nodes), leads it at epoch 0 when it
// answers.
using TopologyAnswers = std::vector<std::optional<v1::TopologyResponse>>;

// The leader of each of `shard_count` shards, as above.
std::vector<Leadership> LeadersOf(const TopologyAnswers& answers, uint32_t shard_count);

// Two nodes that both answered naming themselves leader of one shard at the
// same epoch: one line per such shard. Epochs are raised through etcd, so
// this never happens in a correct cluster.
std::vector<std::string> LeadershipConflicts(const TopologyAnswers& answers, uint32_t shard_count);

// "shard 0: node 1 epoch 3, shard 1: no leader, ..."
std::string Describe(const std::vector<Leadership>& leaders);

// How long each shard had no leader, from observations of LeadersOf over
// time: a shard unled at an observation counts as unled since the one
// before it. Not thread-safe.
class LeaderlessTimes {
 public:
  struct Shard {
    absl::Duration total;    // Summed over every gap.
    absl::Duration longest;  // The longest single gap.
    int gaps = 0;
    int leader_changes = 0;  // Observed changes of leading node or epoch.
  };

  explicit LeaderlessTimes(uint32_t shard_count)
      : shards_(shard_count), gaps_(shard_count), last_led_(shard_count) {}

  // `leaders` as observed at `at`; instants must not go back.
  void Observe(client::SteadyTime at, const std::vector<Leadership>& leaders);

  const std::vector<Shard>& shards() const { return shards_; }
  // One line per shard, for the test's output.
  std::string Report() const;

 private:
  struct Gap {
    bool open = false;
    absl::Duration length;
  };

  std::vector<Shard> shards_;
  std::vector<Gap> gaps_;
  std::vector<std::optional<Leadership>> last_led_;  // The last leader seen.
  std::optional<client::SteadyTime> previous_;       // The last observation.
};

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_SHARD_LEADERS_H_
