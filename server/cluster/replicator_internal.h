#ifndef DEDUP_SERVER_CLUSTER_REPLICATOR_INTERNAL_H_
#define DEDUP_SERVER_CLUSTER_REPLICATOR_INTERNAL_H_

// What the files of the Replicator (replicator*.cc) share: its constants,
// the values it keeps in etcd, and conversions. Included by them alone.

#include <time.h>

#include <algorithm>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel.h"
#include "server/cluster/replicator.h"
#include "server/logging.h"
#include "server/replication/election.h"
#include "server/replication/move_rule.h"
#include "server/replication/placement.h"
#include "server/replication/quorum.h"
#include "server/replication/timing.h"
#include "spdlog/spdlog.h"
#include "storage/thread_name.h"

namespace dedup::server::cluster {

namespace rv1 = ::dedup::replication::v1;
namespace core = ::dedup::server::replication;
using core::MovingTick;
using core::PeerTimeout;
using core::Tick;
using core::TrustedLease;
using storage::LogEntry;
using storage::LogPosition;

// A leader of epoch e hands out tokens e * 2^40 + 1, + 2, ...
constexpr int kTokenEpochShift = 40;
// Why a write waiting for its commit is answered UNAVAILABLE.
constexpr char kNotCommitted[] =
    "the write was not acknowledged by a majority of its replicas in time; it may or may not "
    "take effect, retry";
// Elections that may run at once on one node (ElectionWorker): enough
// that a node taking over a third of 1,024 shards at once does it in a
// few rounds, even when each election waits on a hung voter.
constexpr size_t kElectionWorkers = 64;

// Shards a leader gives back to their first replica in one pass of the
// coordinating loop, at most (BalanceLeaders).
constexpr size_t kBalancePerPass = 16;
// Placement keys a new cluster writes per etcd transaction: half of etcd's
// default limit on a transaction's operations (--max-txn-ops, 128).
constexpr size_t kPlacementKeysPerTxn = 64;

// Entries shipped in one call, at most (one entry always goes), and
// records in one page of a restore, when the peers' message limits allow.
constexpr size_t kShipBytes = 1 << 20;
constexpr size_t kMinShipBytes = 16 << 10;
// Entries a leader keeps for a follower that does not take them (down, or
// partitioned); one further behind is re-seeded from a copy of the
// records when it returns.
constexpr uint64_t kLogRetention = 500'000;
// Logs are trimmed in steps of at least this many entries.
constexpr uint64_t kTrimStep = 1024;
// A follower applies committed entries to its records once this many are
// waiting, or when an append brings no entries (a heartbeat, which also
// carries the last commit after a burst): one RocksDB write for many
// entries rather than one per append. Nothing waits for a follower's
// records; a follower that is elected applies everything committed first.
constexpr uint64_t kFollowerApplyEntries = 64;

// Nanoseconds on CLOCK_BOOTTIME: monotonic like the steady clock, and it
// keeps counting while the host is suspended, as etcd's clock does. A
// leader whose host slept through its lease then sees the lease as ended.
inline int64_t SteadyNowNs() {
  timespec now;
  clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

inline LogPosition FromProto(const rv1::Position& p) { return {p.epoch(), p.seq()}; }

inline void ToProto(LogPosition position, rv1::Position* out) {
  out->set_epoch(position.epoch);
  out->set_seq(position.seq);
}

// Placement values: "voters=0,1,2 learners=3" and moves:
// "from=0 to=3 state=adding".
inline std::string NodeList(const std::vector<uint32_t>& nodes) {
  std::string out;
  for (uint32_t node : nodes) absl::StrAppend(&out, out.empty() ? "" : ",", node);
  return out;
}

inline std::string PlacementValue(const std::vector<uint32_t>& voters,
                                  const std::vector<uint32_t>& learners) {
  return absl::StrCat("voters=", NodeList(voters), " learners=", NodeList(learners));
}

inline bool ParseNodes(absl::string_view text, std::vector<uint32_t>* nodes) {
  nodes->clear();
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint32_t node;
    if (!absl::SimpleAtoi(part, &node) || std::count(nodes->begin(), nodes->end(), node) > 0) {
      return false;
    }
    nodes->push_back(node);
  }
  return true;
}

// Fields "name=value" separated by spaces.
inline std::map<std::string, std::string> Fields(absl::string_view value) {
  std::map<std::string, std::string> fields;
  for (absl::string_view part : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) continue;
    fields[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
  }
  return fields;
}

inline bool ParsePlacement(absl::string_view value, std::vector<uint32_t>* voters,
                           std::vector<uint32_t>* learners) {
  std::map<std::string, std::string> fields = Fields(value);
  if (!fields.count("voters") || !ParseNodes(fields["voters"], voters) || voters->empty() ||
      !ParseNodes(fields["learners"], learners)) {
    return false;
  }
  for (uint32_t node : *learners) {
    if (std::count(voters->begin(), voters->end(), node) > 0) return false;
  }
  return true;
}

inline std::string MoveValue(int32_t from, int32_t to, absl::string_view state) {
  return absl::StrCat("from=", from, " to=", to, " state=", state);
}

inline bool ParseMove(absl::string_view value, int32_t* from, int32_t* to, std::string* state) {
  std::map<std::string, std::string> fields = Fields(value);
  *state = fields["state"];
  return absl::SimpleAtoi(fields["from"], from) && absl::SimpleAtoi(fields["to"], to) &&
         (*state == "adding" || *state == "promoted");
}

inline std::string EmptyBatch() {
  // The representation of an empty RocksDB WriteBatch: sequence (8 bytes)
  // and count (4 bytes), all zero.
  return std::string(12, '\0');
}

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_REPLICATOR_INTERNAL_H_
