#include "topology.h"

#include <algorithm>
#include <utility>

#include "absl/synchronization/notification.h"
#include "completion_thread.h"
#include "grpc_deadline.h"

namespace dedup::client {
namespace {

const std::string& OpNamespace(const v1::Operation& op) {
  switch (op.op_case()) {
    case v1::Operation::kClaim:
      return op.claim().namespace_();
    case v1::Operation::kComplete:
      return op.complete().namespace_();
    case v1::Operation::kRelease:
      return op.release().namespace_();
    case v1::Operation::kExtend:
      return op.extend().namespace_();
    default:
      return op.query().namespace_();
  }
}

const std::string& OpKey(const v1::Operation& op) {
  switch (op.op_case()) {
    case v1::Operation::kClaim:
      return op.claim().key();
    case v1::Operation::kComplete:
      return op.complete().key();
    case v1::Operation::kRelease:
      return op.release().key();
    case v1::Operation::kExtend:
      return op.extend().key();
    default:
      return op.query().key();
  }
}

}  // namespace

// One fetch of the map: its candidates in the order they are asked.
// Guarded by Topology::mu_.
struct Topology::Fetch {
  std::vector<NodeConnection*> candidates;
  size_t asked = 0;   // candidates[0, asked) were asked.
  int in_flight = 0;  // Calls of this fetch not yet answered.
  bool over = false;  // A node answered, or every one failed.
};

// One Topology call.
struct Topology::FetchCall {
  explicit FetchCall(LiveCalls* live) : live(live) {}
  const LiveCalls::Token live;  // First: outlives context (see live_calls.h).
  grpc::ClientContext context;
  v1::TopologyRequest request;
  v1::TopologyResponse response;
};

Topology::Topology(std::vector<std::string> seeds, const NodeConnection::Options& options,
                   Scheduler* scheduler, LiveCalls* live)
    : seeds_(std::move(seeds)),
      options_(options),
      scheduler_(scheduler),
      live_calls_(live),
      routes_(seeds_.front()),
      last_fetch_start_(SteadyTime::FromOrigin(-absl::InfiniteDuration())) {
  absl::MutexLock lock(&mu_);
  connections_ = {NodeFor(seeds_.front())};
}

void Topology::Refresh() {
  absl::Notification done;
  std::shared_ptr<Fetch> fetch;
  {
    absl::MutexLock lock(&mu_);
    after_fetch_.push_back([&done] { done.Notify(); });
    if (!fetching_) fetch = BeginFetch();
  }
  if (fetch != nullptr) AskNext(fetch);
  done.WaitForNotification();
}

void Topology::RefreshThen(std::function<void()> then) {
  std::shared_ptr<Fetch> fetch;
  SteadyTime due;
  {
    absl::MutexLock lock(&mu_);
    if (then != nullptr) after_fetch_.push_back(std::move(then));
    if (fetching_ || fetch_due_ || closed_) return;
    due = last_fetch_start_ + kMinRefreshInterval;
    if (scheduler_->clock().SteadyNow() >= due) {
      fetch = BeginFetch();
    } else {
      fetch_due_ = true;
    }
  }
  if (fetch != nullptr) {
    AskNext(fetch);
  } else {
    scheduler_->At(due, [this] { StartDueFetch(); });
  }
}

void Topology::StartDueFetch() {
  std::shared_ptr<Fetch> fetch;
  {
    absl::MutexLock lock(&mu_);
    fetch_due_ = false;
    // A Refresh may have started one meanwhile; its end runs the waiters.
    if (fetching_ || closed_) return;
    fetch = BeginFetch();
  }
  AskNext(fetch);
}

std::shared_ptr<Topology::Fetch> Topology::BeginFetch() {
  fetching_ = true;
  last_fetch_start_ = scheduler_->clock().SteadyNow();
  auto fetch = std::make_shared<Fetch>();
  const size_t n = connections_.size();
  for (size_t i = 0; i < n; ++i) fetch->candidates.push_back(connections_[(fetches_ + i) % n]);
  ++fetches_;
  for (const std::string& seed : seeds_) {
    NodeConnection* node = NodeFor(seed);
    if (std::find(fetch->candidates.begin(), fetch->candidates.end(), node) ==
        fetch->candidates.end()) {
      fetch->candidates.push_back(node);
    }
  }
  // Those whose last Topology call failed go last, in the same order.
  std::vector<NodeConnection*> failed;
  auto kept = fetch->candidates.begin();
  for (NodeConnection* node : fetch->candidates) {
    if (unanswered_.count(node) != 0) {
      failed.push_back(node);
    } else {
      *kept++ = node;
    }
  }
  std::copy(failed.begin(), failed.end(), kept);
  return fetch;
}

std::vector<std::function<void()>> Topology::EndFetch(Fetch& fetch) {
  fetch.over = true;
  fetching_ = false;
  std::vector<std::function<void()>> waiting = std::move(after_fetch_);
  after_fetch_.clear();
  if (closed_) waiting.clear();  // Nothing may run on a closed client.
  return waiting;
}

void Topology::AskNext(const std::shared_ptr<Fetch>& fetch) {
  NodeConnection* node = nullptr;
  size_t n = 0;
  std::shared_ptr<FetchCall> call;
  std::vector<std::function<void()>> waiting;
  {
    absl::MutexLock lock(&mu_);
    if (fetch->over) return;
    if (closed_ || fetch->asked == fetch->candidates.size()) {
      // Nobody left to ask: over once the calls in flight have failed too.
      if (fetch->in_flight == 0) waiting = EndFetch(*fetch);
    } else {
      node = fetch->candidates[fetch->asked++];
      n = fetch->asked;
      ++fetch->in_flight;
      call = std::make_shared<FetchCall>(live_calls_);
      calls_.insert(call);
    }
  }
  for (auto& then : waiting) then();
  if (call == nullptr) return;
  if (n < fetch->candidates.size()) {
    scheduler_->After(kHedgeDelay, [this, fetch, n] { Hedge(fetch, n); });
  }
  call->context.set_deadline(GrpcDeadlineIn(kTopologyTimeout));
  StartUnary<v1::TopologyResponse>(
      node->stub()->PrepareAsyncTopology(&call->context, call->request, options_.completions),
      &call->response, [this, fetch, call, node](const grpc::Status& status) {
        Answered(fetch, call, node, status);
      });
}

void Topology::Hedge(const std::shared_ptr<Fetch>& fetch, size_t n) {
  {
    absl::MutexLock lock(&mu_);
    // Over, or the next one was asked already (the n-th failed).
    if (fetch->over || fetch->asked != n) return;
  }
  AskNext(fetch);
}

void Topology::Answered(const std::shared_ptr<Fetch>& fetch, const std::shared_ptr<FetchCall>& call,
                        NodeConnection* node, const grpc::Status& status) {
  bool ask_next = false;
  std::vector<std::function<void()>> waiting;
  {
    absl::MutexLock lock(&mu_);
    --fetch->in_flight;
    if (status.ok()) {
      unanswered_.erase(node);
      // A late answer of a fetch already over is a map too: ShardRoutes
      // keeps it from undoing a newer one.
      if (!closed_) Adopt(call->response, node);
      if (!fetch->over) waiting = EndFetch(*fetch);
    } else {
      unanswered_.insert(node);
      ask_next = !fetch->over;  // Or ends the fetch, if nobody is left.
    }
  }
  if (ask_next) AskNext(fetch);
  for (auto& then : waiting) then();
  absl::MutexLock lock(&mu_);
  calls_.erase(call);  // Last: Close waits for it.
}

void Topology::Adopt(const v1::TopologyResponse& map, NodeConnection* answered) {
  if (!routes_.Adopt(map, answered->address())) return;
  ++generation_;
  connections_.clear();
  for (const std::string& address : routes_.nodes()) connections_.push_back(NodeFor(address));
}

NodeConnection* Topology::Route(const v1::Operation& op, uint64_t* generation) {
  absl::MutexLock lock(&mu_);
  if (generation != nullptr) *generation = generation_;
  return connections_[routes_.NodeFor(OpNamespace(op), OpKey(op))];
}

uint64_t Topology::generation() {
  absl::MutexLock lock(&mu_);
  return generation_;
}

std::vector<NodeConnection*> Topology::Owners() {
  absl::MutexLock lock(&mu_);
  std::vector<NodeConnection*> unique;
  for (NodeConnection* node : connections_) {
    if (std::find(unique.begin(), unique.end(), node) == unique.end()) unique.push_back(node);
  }
  return unique;
}

void Topology::StopFetching() {
  std::set<std::shared_ptr<FetchCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    calls = calls_;
  }
  for (const auto& call : calls) call->context.TryCancel();
  calls.clear();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::set<std::shared_ptr<FetchCall>>* calls) { return calls->empty(); }, &calls_));
}

void Topology::Close() {
  StopFetching();
  std::vector<NodeConnection*> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [address, node] : nodes_) all.push_back(node.get());
  }
  // Not under mu_: closing waits for the streams' last callbacks.
  for (NodeConnection* node : all) node->Close();
}

NodeConnection* Topology::NodeFor(const std::string& address) {
  std::unique_ptr<NodeConnection>& node = nodes_[address];
  if (node == nullptr) {
    node = std::make_unique<NodeConnection>(address, options_, scheduler_, live_calls_);
  }
  return node.get();
}

}  // namespace dedup::client
