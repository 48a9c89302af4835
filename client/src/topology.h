#ifndef DEDUP_CLIENT_SRC_TOPOLOGY_H_
#define DEDUP_CLIENT_SRC_TOPOLOGY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "live_calls.h"
#include "node_connection.h"
#include "scheduler.h"
#include "shard_routes.h"

namespace dedup::client {

// The cluster as the client sees it: its nodes, and which of them each key
// goes to (ShardRoutes: the static owner, or in a replicated cluster the
// shard's leader). Each node has its own NodeConnection, so a node that is
// down fails only its own keys. Until a node answers with a cluster map,
// the first seed gets every key.
//
// The map is fetched with Topology calls, asking the nodes of the map and
// then the seeds one at a time, each fetch starting from the node after
// the one the last fetch started from, so that one node with an old view
// does not hold every fetch back. Nodes whose last Topology call failed
// are asked last, and a node that has not answered within kHedgeDelay does
// not hold the fetch up: the next one is asked meanwhile. The first answer
// ends the fetch.
//
// Thread-safe.
class Topology {
 public:
  // How long one node may take to answer for the map.
  static constexpr absl::Duration kTopologyTimeout = absl::Seconds(2);
  // After this long without an answer, the next node is asked too.
  static constexpr absl::Duration kHedgeDelay = absl::Milliseconds(200);
  // RefreshThen starts a fetch no sooner than this after the last one.
  static constexpr absl::Duration kMinRefreshInterval = absl::Milliseconds(100);

  // `seeds`: the endpoints the client was given, at least one. Connections
  // are made with `options`. `scheduler` and `live` must outlive the
  // topology. The scheduler must run tasks until StopFetching has returned
  // (fetches use it), and no more by the time Close is called (see
  // NodeConnection).
  Topology(std::vector<std::string> seeds, const NodeConnection::Options& options,
           Scheduler* scheduler, LiveCalls* live);

  // Fetches the map now, or joins the fetch in flight, and returns once it
  // has ended: with the first answer, or with the map it had if no node
  // answered. Blocks up to kTopologyTimeout per node that does not answer.
  // Not after Close.
  void Refresh();

  // Fetches the map in the background, and runs `then` (if not null) once
  // that fetch has ended, whether or not a node answered. At most one fetch
  // is in flight: this joins the one in flight, or the one due, and starts
  // one no sooner than kMinRefreshInterval after the last started. `then`
  // runs on the completion thread or the scheduler's, with no lock held,
  // and must not block. After StopFetching, `then` never runs.
  void RefreshThen(std::function<void()> then);

  // The node to send `op` to. Sets `*generation` (if not null) to the
  // generation of the map it was routed on; see generation().
  NodeConnection* Route(const v1::Operation& op, uint64_t* generation = nullptr);

  // Changes each time some key's node changes.
  uint64_t generation();

  // Every node of the map, once each.
  std::vector<NodeConnection*> Owners();

  // Cancels the Topology calls in flight and waits for them to end; from
  // then on no fetch starts, and nothing the topology does needs the
  // scheduler.
  void StopFetching();

  // StopFetching, then closes the streams of every node ever known and
  // waits for them to end. Call once nothing is sent any more.
  void Close();

 private:
  struct Fetch;
  struct FetchCall;

  NodeConnection* NodeFor(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Adopt(const v1::TopologyResponse& map, NodeConnection* answered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks a fetch as started and lists whom it asks, in order.
  std::shared_ptr<Fetch> BeginFetch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `fetch`; returns what was waiting for it, to run without the lock.
  std::vector<std::function<void()>> EndFetch(Fetch& fetch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartDueFetch() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the next candidate of `fetch`, if it has one left.
  void AskNext(const std::shared_ptr<Fetch>& fetch) ABSL_LOCKS_EXCLUDED(mu_);
  // `asked` was asked as the `n`-th candidate; asks the next if it is still
  // the last asked and the fetch is not over.
  void Hedge(const std::shared_ptr<Fetch>& fetch, size_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void Answered(const std::shared_ptr<Fetch>& fetch, const std::shared_ptr<FetchCall>& call,
                NodeConnection* node, const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const std::vector<std::string> seeds_;
  const NodeConnection::Options options_;
  Scheduler* const scheduler_;
  LiveCalls* const live_calls_;

  absl::Mutex mu_;
  // Every node ever known, by address; none is removed while the topology
  // lives, so pointers to them stay valid.
  std::map<std::string, std::unique_ptr<NodeConnection>> nodes_ ABSL_GUARDED_BY(mu_);
  ShardRoutes routes_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeConnection*> connections_ ABSL_GUARDED_BY(mu_);  // routes_.nodes()'s.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;

  // Fetching the map.
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;
  bool fetch_due_ ABSL_GUARDED_BY(mu_) = false;  // A fetch is scheduled.
  SteadyTime last_fetch_start_ ABSL_GUARDED_BY(mu_);
  uint64_t fetches_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::function<void()>> after_fetch_ ABSL_GUARDED_BY(mu_);
  // Nodes whose last Topology call failed.
  std::set<NodeConnection*> unanswered_ ABSL_GUARDED_BY(mu_);
  // Topology calls in flight, of any fetch.
  std::set<std::shared_ptr<FetchCall>> calls_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_TOPOLOGY_H_
