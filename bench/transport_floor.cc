// dedup_transport_floor: what gRPC alone costs per claim on this machine.
//
// Serves dedup.v1.Dedup's Claim, Batch, Stream and Topology (and gRPC
// health) on 127.0.0.1 with canned answers: every claim is ACQUIRED, no
// storage, no checks. dedup_bench drives it exactly as it drives dedupd
// (the client library calls Topology, then coalesces onto Stream), so the
// server CPU per claim it reports is the floor that dedupd's transport
// cannot go under (bench/floors). Two ways of serving:
//   --api=callback  gRPC's callback API and its default health service,
//                   as dedupd serves (its callbacks run on gRPC's own
//                   threads, at least two of them);
//   --api=async     gRPC's asynchronous API: one completion queue, polled
//                   by --threads threads (default one) that also answer,
//                   and a health service of its own on the same queue, so
//                   that no callback thread exists (--grpc_health: gRPC's
//                   default health service instead, which brings them).
//
// Replicated (--nodes=A,B,C --index=I, callback API only): one of three
// nodes in the shape of a cluster of replication_factor=3 with nothing of
// its storage. Topology names the three nodes and --shards; the client
// library sends each key to the node that owns its shard, as it does to a
// cluster's leaders. Each node makes a Stream batch's operations log
// entries, one per operation's shard; one thread per other node ships
// every entry not yet sent in one dedup.replication.v1.Replication/Ship
// call and waits for its answer, as dedupd's leader does; a batch is
// answered, from the thread that saw it, once one other node holds its
// entries (a majority of three). Every node also answers the others' Ship
// with canned APPENDED results. What a cluster's CPU per claim is beyond
// these three processes is its storage, log and bookkeeping
// (bench/replicated --systems=floor3). Other ways to ship, to compare:
// --transport=stream (one bidirectional stream per peer, a message per
// round), --transport=callback (no thread per peer: a call starts on the
// thread that appends, or on gRPC's thread that takes the last answer),
// and --ship=false (answer at once: the client's routing alone).
//
// Stops on SIGTERM or SIGINT.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dedup/replication/v1/replication.grpc.pb.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "storage/key_codec.h"

ABSL_FLAG(int, port, 0, "Port on 127.0.0.1 (0: the kernel picks; the chosen port is printed).");
ABSL_FLAG(std::string, api, "callback", "callback (as dedupd serves) or async.");
ABSL_FLAG(int, threads, 1, "--api=async: threads polling the one completion queue.");
ABSL_FLAG(bool, grpc_health, false,
          "--api=async: serve health with gRPC's default service (a callback service, so "
          "gRPC's callback threads exist and poll too) instead of on the queue.");
ABSL_FLAG(std::vector<std::string>, nodes, {},
          "HOST:PORT of every node of a replicated floor, in order (three for "
          "replication_factor=3): each replicates the batches of the shards it owns to the "
          "others before answering them.");
ABSL_FLAG(int, index, 0, "--nodes: this node's place in --nodes (its own address).");
ABSL_FLAG(int, shards, 1024, "--nodes: shards of the map the client library routes by.");
ABSL_FLAG(std::string, transport, "unary",
          "--nodes: how a node ships to another: unary (a thread per peer, one blocking "
          "Replication/Ship call per round, as dedupd), stream (a thread per peer, one "
          "bidirectional stream, a message per round) or callback (no thread per peer: unary "
          "calls started by the thread that appends or by gRPC's thread that takes the last "
          "answer).");
ABSL_FLAG(bool, ship, true,
          "--nodes: replicate before answering (false: answer at once, which shows what the "
          "client's routing over the nodes alone costs).");

namespace {

using dedup::v1::BatchRequest;
using dedup::v1::BatchResponse;
using dedup::v1::ClaimRequest;
using dedup::v1::ClaimResponse;
using dedup::v1::TopologyRequest;
using dedup::v1::TopologyResponse;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

std::string g_target;  // 127.0.0.1:port, once bound: the one node of the map.
// With --nodes: the map every node answers Topology with.
std::vector<std::string> g_nodes;
int g_index = 0;
uint32_t g_shards = 0;

void CannedClaim(ClaimResponse* response) {
  response->set_outcome(ClaimResponse::ACQUIRED);
  response->set_token(1);
  response->set_lease_expires_ms(1);
}

void CannedBatch(const BatchRequest& request, BatchResponse* response) {
  response->set_batch_id(request.batch_id());
  for (const dedup::v1::Operation& operation : request.operations()) {
    dedup::v1::OperationResult* result = response->add_results();
    if (operation.has_complete()) {
      result->mutable_complete()->set_outcome(dedup::v1::CompleteResponse::OK);
    } else {
      CannedClaim(result->mutable_claim());
    }
  }
}

// The method of the streaming transport (--transport=stream), served by
// GenericFloor: a ShipRequest per message, answered by a ShipResponse.
constexpr char kShipStreamMethod[] = "/dedup.floor.v1.Floor/ShipStream";

// One bidirectional stream to a peer, used by one thread: Ship writes a
// request and waits for its answer on a completion queue of its own, as a
// blocking unary call does, but with no call set up per round.
class ShipStream {
 public:
  explicit ShipStream(const std::shared_ptr<grpc::Channel>& channel) : stub_(channel) {}
  ~ShipStream() {
    Close();
    queue_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  grpc::Status Ship(const dedup::replication::v1::ShipRequest& request,
                    dedup::replication::v1::ShipResponse* response) {
    if (call_ == nullptr && !Open()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "cannot open the Ship stream");
    }
    grpc::ByteBuffer out;
    bool own = false;
    grpc::Status status = grpc::SerializationTraits<dedup::replication::v1::ShipRequest>::Serialize(
        request, &out, &own);
    if (!status.ok()) return status;
    call_->Write(out, this);
    if (!Await()) return Broken("write");
    grpc::ByteBuffer in;
    call_->Read(&in, this);
    if (!Await()) return Broken("read");
    return grpc::SerializationTraits<dedup::replication::v1::ShipResponse>::Deserialize(&in,
                                                                                        response);
  }

 private:
  bool Open() {
    context_ = std::make_unique<grpc::ClientContext>();
    call_ = stub_.PrepareCall(context_.get(), kShipStreamMethod, &queue_);
    call_->StartCall(this);
    if (Await()) return true;
    Close();
    return false;
  }
  grpc::Status Broken(const char* what) {
    Close();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the Ship stream's ", what, " failed"));
  }
  bool Await() {
    void* tag = nullptr;
    bool ok = false;
    return queue_.Next(&tag, &ok) && ok;
  }
  void Close() {
    if (call_ == nullptr) return;
    context_->TryCancel();
    grpc::Status status;
    call_->Finish(&status, this);
    Await();
    call_.reset();
    context_.reset();
  }

  grpc::GenericStub stub_;
  grpc::CompletionQueue queue_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

// How a node ships to another (--transport).
enum class Transport {
  kUnary,     // A thread per peer, blocking in one Replication/Ship call at a time.
  kStream,    // A thread per peer, blocking on one bidirectional stream.
  kCallback,  // No thread per peer: a call starts on the thread that appends,
              // when none is out to the peer, and the next on gRPC's thread
              // that takes the answer.
};

// A leader's side of replication, without storage: the entries not yet
// held by both followers, their shipping, and the calls waiting for a
// follower to hold theirs.
class Replicator {
 public:
  Replicator(const std::vector<std::string>& followers, uint32_t shards, Transport transport)
      : shards_(shards), transport_(transport) {
    for (const std::string& address : followers) {
      auto peer = std::make_unique<Peer>();
      std::shared_ptr<grpc::Channel> channel =
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      if (transport_ == Transport::kStream) {
        peer->stream = std::make_unique<ShipStream>(channel);
      } else {
        peer->stub = dedup::replication::v1::Replication::NewStub(channel);
      }
      peers_.push_back(std::move(peer));
    }
    if (transport_ == Transport::kCallback) {
      retry_ = std::thread([this] { RetryLoop(); });
    } else {
      for (auto& peer : peers_) {
        peer->thread = std::thread([this, p = peer.get()] { ShipLoop(p); });
      }
    }
  }

  // Stops shipping and runs every waiting call's `done`, so that each call
  // is answered before the server shuts down.
  ~Replicator() {
    std::vector<std::function<void()>> done;
    {
      std::unique_lock<std::mutex> lock(mu_);
      stopping_ = true;
      wake_.notify_all();
      stopped_.notify_all();
      // Callback shipping: until no call is out.
      stopped_.wait(lock, [&] { return calls_out_ == 0; });
      for (Waiting& waiting : waiting_) done.push_back(std::move(waiting.done));
      waiting_.clear();
    }
    for (auto& peer : peers_) {
      if (peer->thread.joinable()) peer->thread.join();
    }
    if (retry_.joinable()) retry_.join();
    for (auto& call : done) call();
  }

  // Logs one entry per operation, in its key's shard, and runs `done` once
  // a follower holds them all.
  void Replicate(const BatchRequest& request, std::function<void()> done) {
    std::vector<std::unique_ptr<Call>> calls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const dedup::v1::Operation& operation : request.operations()) {
        const std::string& key =
            operation.has_complete() ? operation.complete().key() : operation.claim().key();
        LogEntry entry;
        entry.seq = ++last_seq_;
        const std::string& ns = operation.has_complete() ? operation.complete().namespace_()
                                                         : operation.claim().namespace_();
        entry.shard = dedup::storage::ShardOf(ns, key, shards_);
        // About a logged write's size: the operation and a record's worth more.
        entry.bytes = operation.SerializeAsString();
        entry.bytes.append(kRecordBytes, 'r');
        log_.push_back(std::move(entry));
      }
      waiting_.push_back({last_seq_, std::move(done)});
      if (transport_ == Transport::kCallback) {
        for (auto& peer : peers_) {
          if (auto call = PrepareCall(peer.get())) calls.push_back(std::move(call));
        }
      } else {
        wake_.notify_all();
      }
    }
    for (auto& call : calls) Start(std::move(call));
  }

 private:
  static constexpr size_t kRecordBytes = 96;
  struct LogEntry {
    uint64_t seq = 0;
    uint32_t shard = 0;
    std::string bytes;
  };
  struct Waiting {
    uint64_t seq = 0;
    std::function<void()> done;
  };
  struct Peer {
    // kUnary and kCallback: the stub; kStream: the stream.
    std::unique_ptr<dedup::replication::v1::Replication::Stub> stub;
    std::unique_ptr<ShipStream> stream;
    uint64_t held = 0;       // The follower holds every entry through here.
    bool in_flight = false;  // kCallback: a call is out to it.
    std::thread thread;      // kUnary and kStream.
  };
  struct Call {  // kCallback: one call out.
    Peer* peer = nullptr;
    grpc::ClientContext context;
    dedup::replication::v1::ShipRequest request;
    dedup::replication::v1::ShipResponse response;
    uint64_t through = 0;
  };

  // Holding mu_: fills `request` with every entry `peer` lacks, grouped
  // into one append per shard; returns the last entry's seq.
  uint64_t TakeRequest(const Peer& peer, dedup::replication::v1::ShipRequest* request) {
    std::map<uint32_t, dedup::replication::v1::AppendRequest*> appends;
    for (size_t i = peer.held - trimmed_; i < log_.size(); ++i) {
      const LogEntry& entry = log_[i];
      dedup::replication::v1::AppendRequest*& append = appends[entry.shard];
      if (append == nullptr) {
        append = request->add_appends();
        append->set_shard(entry.shard);
        append->set_epoch(1);
        append->mutable_prev()->set_epoch(1);
        append->mutable_prev()->set_seq(entry.seq - 1);
        append->set_commit_seq(peer.held);
      }
      dedup::replication::v1::Entry* shipped = append->add_entries();
      shipped->set_epoch(1);
      shipped->set_seq(entry.seq);
      shipped->set_batch(entry.bytes);
    }
    return last_seq_;
  }

  // Holding mu_: `peer` holds every entry through `through`. Returns the
  // `done` of the calls now held by a follower, to be run without mu_.
  std::vector<std::function<void()>> Acknowledge(Peer* peer, uint64_t through) {
    std::vector<std::function<void()>> done;
    peer->held = through;
    uint64_t committed = 0, everywhere = through;
    for (const auto& each : peers_) {
      committed = std::max(committed, each->held);
      everywhere = std::min(everywhere, each->held);
    }
    while (!waiting_.empty() && waiting_.front().seq <= committed) {
      done.push_back(std::move(waiting_.front().done));
      waiting_.pop_front();
    }
    log_.erase(log_.begin(), log_.begin() + static_cast<long>(everywhere - trimmed_));
    trimmed_ = everywhere;
    return done;
  }

  // kUnary and kStream: one Ship at a time to `peer`, on this thread.
  void ShipLoop(Peer* peer) {
    for (;;) {
      dedup::replication::v1::ShipRequest request;
      uint64_t through = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || last_seq_ > peer->held; });
        if (stopping_) return;
        through = TakeRequest(*peer, &request);
      }
      dedup::replication::v1::ShipResponse response;
      grpc::Status status;
      if (peer->stream != nullptr) {
        status = peer->stream->Ship(request, &response);
      } else {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        status = peer->stub->Ship(&context, request, &response);
      }
      if (!status.ok()) {
        fprintf(stderr, "dedup_transport_floor: Ship failed: %s\n", status.error_message().c_str());
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      std::vector<std::function<void()>> done;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done = Acknowledge(peer, through);
      }
      for (auto& call : done) call();
    }
  }

  // kCallback, holding mu_: the next call to `peer`, if none is out and it
  // lacks entries.
  std::unique_ptr<Call> PrepareCall(Peer* peer) {
    if (stopping_ || peer->in_flight || last_seq_ <= peer->held) return nullptr;
    auto call = std::make_unique<Call>();
    call->peer = peer;
    call->through = TakeRequest(*peer, &call->request);
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    peer->in_flight = true;
    ++calls_out_;
    return call;
  }

  void Start(std::unique_ptr<Call> call) {
    Call* out = call.release();
    out->peer->stub->async()->Ship(
        &out->context, &out->request, &out->response,
        [this, out](grpc::Status status) { Shipped(std::unique_ptr<Call>(out), status); });
  }

  // On gRPC's thread with the answer: the calls it commits are answered
  // here, and the peer's next call starts here.
  void Shipped(std::unique_ptr<Call> call, const grpc::Status& status) {
    std::vector<std::function<void()>> done;
    std::unique_ptr<Call> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Peer* peer = call->peer;
      peer->in_flight = false;
      --calls_out_;
      if (status.ok()) {
        done = Acknowledge(peer, call->through);
        next = PrepareCall(peer);
      } else {
        fprintf(stderr, "dedup_transport_floor: Ship failed: %s\n", status.error_message().c_str());
      }
      if (calls_out_ == 0) stopped_.notify_all();
    }
    for (auto& each : done) each();
    if (next != nullptr) Start(std::move(next));
  }

  // kCallback: a peer whose call failed (not up yet) gets another every
  // 100 ms while it lacks entries.
  void RetryLoop() {
    for (;;) {
      std::vector<std::unique_ptr<Call>> calls;
      {
        std::unique_lock<std::mutex> lock(mu_);
        stopped_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping_; });
        if (stopping_) return;
        for (auto& peer : peers_) {
          if (auto call = PrepareCall(peer.get())) calls.push_back(std::move(call));
        }
      }
      for (auto& call : calls) Start(std::move(call));
    }
  }

  const uint32_t shards_;
  const Transport transport_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::mutex mu_;
  std::condition_variable wake_;     // kUnary and kStream: entries to ship, or stopping.
  std::condition_variable stopped_;  // kCallback: stopping, or no call out any more.
  bool stopping_ = false;
  int calls_out_ = 0;
  uint64_t last_seq_ = 0;
  uint64_t trimmed_ = 0;  // log_ holds the entries after this one.
  std::deque<LogEntry> log_;
  std::deque<Waiting> waiting_;  // By seq.
  std::thread retry_;            // kCallback.
};

Replicator* g_replicator = nullptr;  // With --nodes.

// A peer's answer: every append is held.
void CannedShip(const dedup::replication::v1::ShipRequest& request,
                dedup::replication::v1::ShipResponse* response) {
  for (const dedup::replication::v1::AppendRequest& append : request.appends()) {
    dedup::replication::v1::AppendResponse* result = response->add_results();
    result->set_result(dedup::replication::v1::AppendResponse::APPENDED);
    result->mutable_last()->set_epoch(1);
    result->mutable_last()->set_seq(append.entries().empty()
                                        ? append.prev().seq()
                                        : append.entries(append.entries_size() - 1).seq());
    result->mutable_applied()->set_epoch(1);
    result->mutable_applied()->set_seq(append.commit_seq());
    result->set_promised(1);
  }
}

class ReplicationFloor final : public dedup::replication::v1::Replication::CallbackService {
  grpc::ServerUnaryReactor* Ship(grpc::CallbackServerContext* context,
                                 const dedup::replication::v1::ShipRequest* request,
                                 dedup::replication::v1::ShipResponse* response) override {
    CannedShip(*request, response);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// The streaming transport's peer side: each message read is answered
// before the next is read.
class GenericFloor final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    if (context->method() != kShipStreamMethod) {
      return grpc::CallbackGenericService::CreateReactor(context);
    }
    return new ShipStreamReactor;
  }

  class ShipStreamReactor final : public grpc::ServerGenericBidiReactor {
   public:
    ShipStreamReactor() { StartRead(&in_); }
    void OnReadDone(bool ok) override {
      if (!ok) return Finish(grpc::Status::OK);
      dedup::replication::v1::ShipRequest request;
      dedup::replication::v1::ShipResponse response;
      grpc::Status status =
          grpc::SerializationTraits<dedup::replication::v1::ShipRequest>::Deserialize(&in_,
                                                                                      &request);
      if (!status.ok()) return Finish(status);
      CannedShip(request, &response);
      bool own = false;
      out_.Clear();
      status = grpc::SerializationTraits<dedup::replication::v1::ShipResponse>::Serialize(
          response, &out_, &own);
      if (!status.ok()) return Finish(status);
      StartWrite(&out_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) return Finish(grpc::Status::OK);
      StartRead(&in_);
    }
    void OnDone() override { delete this; }

   private:
    grpc::ByteBuffer in_;
    grpc::ByteBuffer out_;
  };
};

// A single node without placement: the client sends everything here.
// With --nodes, the three nodes and the shard count, without leaders: the
// client sends each key to the node that owns its shard.
void CannedTopology(TopologyResponse* response) {
  response->set_version(1);
  if (g_nodes.empty()) {
    response->set_shard_count(16);
    response->add_nodes(g_target);
    return;
  }
  response->set_shard_count(g_shards);
  for (const std::string& node : g_nodes) response->add_nodes(node);
  response->set_node_index(static_cast<uint32_t>(g_index));
}

class CallbackFloor final : public dedup::v1::Dedup::CallbackService {
  grpc::ServerUnaryReactor* Claim(grpc::CallbackServerContext* context, const ClaimRequest* request,
                                  ClaimResponse* response) override {
    CannedClaim(response);
    if (g_replicator == nullptr) return Done(context);
    BatchRequest batch;
    *batch.add_operations()->mutable_claim() = *request;
    return Replicated(context, batch);
  }
  grpc::ServerUnaryReactor* Batch(grpc::CallbackServerContext* context, const BatchRequest* request,
                                  BatchResponse* response) override {
    CannedBatch(*request, response);
    if (g_replicator == nullptr) return Done(context);
    return Replicated(context, *request);
  }
  grpc::ServerUnaryReactor* Topology(grpc::CallbackServerContext* context, const TopologyRequest*,
                                     TopologyResponse* response) override {
    CannedTopology(response);
    return Done(context);
  }
  grpc::ServerBidiReactor<BatchRequest, BatchResponse>* Stream(
      grpc::CallbackServerContext*) override {
    return new StreamReactor;
  }

  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  static grpc::ServerUnaryReactor* Replicated(grpc::CallbackServerContext* context,
                                              const BatchRequest& request) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    g_replicator->Replicate(request, [reactor] { reactor->Finish(grpc::Status::OK); });
    return reactor;
  }

  // Reads batches one after another and writes each answer once it is
  // ready, one write at a time, as dedupd does: with --nodes a batch
  // waits for its entries while the next ones are read. gRPC is called
  // outside mu_.
  class StreamReactor final : public grpc::ServerBidiReactor<BatchRequest, BatchResponse> {
   public:
    StreamReactor() { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        bool finish;
        {
          std::lock_guard<std::mutex> lock(mu_);
          reading_ = false;
          finish = ShouldFinish();
        }
        if (finish) Finish(grpc::Status::OK);
        return;
      }
      auto* response = new BatchResponse;
      CannedBatch(request_, response);
      if (g_replicator == nullptr) {
        Queue(response, /*replicated=*/false);
      } else {
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++replicating_;
        }
        g_replicator->Replicate(request_,
                                [this, response] { Queue(response, /*replicated=*/true); });
      }
      StartRead(&request_);
    }
    void OnWriteDone(bool ok) override {
      BatchResponse* next = nullptr;
      bool finish = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        delete answers_.front();
        answers_.erase(answers_.begin());
        if (!ok) failed_ = true;
        if (!answers_.empty() && !failed_) {
          next = answers_.front();
        } else {
          writing_ = false;
          finish = ShouldFinish();
        }
      }
      if (next != nullptr) StartWrite(next);
      if (finish) Finish(grpc::Status::OK);
    }
    void OnDone() override {
      for (BatchResponse* answer : answers_) delete answer;
      delete this;
    }

   private:
    void Queue(BatchResponse* response, bool replicated) {
      BatchResponse* first = nullptr;
      bool finish = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (replicated) --replicating_;
        answers_.push_back(response);
        if (!writing_ && !failed_) {
          writing_ = true;
          first = answers_.front();
        } else {
          finish = ShouldFinish();
        }
      }
      if (first != nullptr) StartWrite(first);
      if (finish) Finish(grpc::Status::OK);
    }
    bool ShouldFinish() {  // Holding mu_; true once, when nothing is left to do.
      if (reading_ || writing_ || replicating_ > 0 || finished_) return false;
      finished_ = true;
      return true;
    }

    BatchRequest request_;
    std::mutex mu_;
    std::vector<BatchResponse*> answers_;  // To be written; the first is being written.
    bool reading_ = true;
    bool writing_ = false;
    bool failed_ = false;
    bool finished_ = false;
    int replicating_ = 0;
  };
};

// The asynchronous API: every call is an object whose address is its tag
// on the completion queue; Proceed runs its next step.
class Call {
 public:
  virtual ~Call() = default;
  virtual void Proceed(bool ok) = 0;
};

dedup::v1::Dedup::AsyncService g_dedup;
grpc::health::v1::Health::AsyncService g_health;

// One unary call of a kind: asks gRPC for the next call of the kind, and
// once it arrives, asks for another, answers with `fill` and finishes.
template <typename Request, typename Response, typename Ask, typename Fill>
class UnaryCall final : public Call {
 public:
  UnaryCall(grpc::ServerCompletionQueue* queue, Ask ask, Fill fill)
      : queue_(queue), ask_(ask), fill_(fill) {
    ask_(&context_, &request_, &writer_, queue_, this);
  }
  void Proceed(bool ok) override {
    if (answered_ || !ok) {
      delete this;
      return;
    }
    new UnaryCall(queue_, ask_, fill_);
    fill_(request_, &response_);
    answered_ = true;
    writer_.Finish(response_, grpc::Status::OK, this);
  }

 private:
  grpc::ServerCompletionQueue* const queue_;
  const Ask ask_;
  const Fill fill_;
  grpc::ServerContext context_;
  Request request_;
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> writer_{&context_};
  bool answered_ = false;
};

template <typename Request, typename Response, typename Ask, typename Fill>
void ServeUnary(grpc::ServerCompletionQueue* queue, Ask ask, Fill fill) {
  new UnaryCall<Request, Response, Ask, Fill>(queue, ask, fill);
}

class StreamCall final : public Call {
 public:
  explicit StreamCall(grpc::ServerCompletionQueue* queue) : queue_(queue) {
    g_dedup.RequestStream(&context_, &stream_, queue_, queue_, this);
  }
  void Proceed(bool ok) override {
    switch (step_) {
      case Step::kArrived:
        if (!ok) break;
        new StreamCall(queue_);
        return Read();
      case Step::kRead:
        if (!ok) return Finish();
        response_.Clear();
        CannedBatch(request_, &response_);
        step_ = Step::kWritten;
        return stream_.Write(response_, this);
      case Step::kWritten:
        if (!ok) return Finish();
        return Read();
      case Step::kFinished:
        break;
    }
    delete this;
  }

 private:
  enum class Step { kArrived, kRead, kWritten, kFinished };
  void Read() {
    step_ = Step::kRead;
    stream_.Read(&request_, this);
  }
  void Finish() {
    step_ = Step::kFinished;
    stream_.Finish(grpc::Status::OK, this);
  }

  grpc::ServerCompletionQueue* const queue_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<BatchResponse, BatchRequest> stream_{&context_};
  BatchRequest request_;
  BatchResponse response_;
  Step step_ = Step::kArrived;
};

// Outstanding requests for calls of each kind, so that calls arriving
// together need not wait for a new request each.
constexpr int kWaitingCallsPerKind = 16;

void ServeQueue(grpc::ServerCompletionQueue* queue, bool health) {
  for (int i = 0; i < kWaitingCallsPerKind; ++i) {
    ServeUnary<ClaimRequest, ClaimResponse>(
        queue,
        [](auto* context, auto* request, auto* writer, auto* q, void* tag) {
          g_dedup.RequestClaim(context, request, writer, q, q, tag);
        },
        [](const ClaimRequest&, ClaimResponse* response) { CannedClaim(response); });
    ServeUnary<BatchRequest, BatchResponse>(
        queue,
        [](auto* context, auto* request, auto* writer, auto* q, void* tag) {
          g_dedup.RequestBatch(context, request, writer, q, q, tag);
        },
        CannedBatch);
    ServeUnary<TopologyRequest, TopologyResponse>(
        queue,
        [](auto* context, auto* request, auto* writer, auto* q, void* tag) {
          g_dedup.RequestTopology(context, request, writer, q, q, tag);
        },
        [](const TopologyRequest&, TopologyResponse* response) { CannedTopology(response); });
    if (health)
      ServeUnary<HealthCheckRequest, HealthCheckResponse>(
          queue,
          [](auto* context, auto* request, auto* writer, auto* q, void* tag) {
            g_health.RequestCheck(context, request, writer, q, q, tag);
          },
          [](const HealthCheckRequest&, HealthCheckResponse* response) {
            response->set_status(HealthCheckResponse::SERVING);
          });
    new StreamCall(queue);
  }
}

volatile std::sig_atomic_t g_stop = 0;

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a server of canned answers, to measure what gRPC alone costs per claim:\n"
      "  dedup_transport_floor --api=callback|async [--threads=1] [--port=0]\n"
      "  dedup_transport_floor --nodes=HOST:PORT,HOST:PORT,HOST:PORT --index=I [--shards=1024]\n"
      "      (listens on the port of its own address in --nodes)");
  absl::ParseCommandLine(argc, argv);
  const std::string api = absl::GetFlag(FLAGS_api);
  const int threads = absl::GetFlag(FLAGS_threads);
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport != "unary" && transport != "stream" && transport != "callback") {
    fprintf(stderr, "dedup_transport_floor: --transport unary, stream or callback\n");
    return 2;
  }
  g_nodes = absl::GetFlag(FLAGS_nodes);
  g_index = absl::GetFlag(FLAGS_index);
  const int shards = absl::GetFlag(FLAGS_shards);
  if ((api != "callback" && api != "async") || threads < 1 || threads > 64) {
    fprintf(stderr, "dedup_transport_floor: --api callback or async, --threads 1..64\n");
    return 2;
  }
  std::vector<std::string> others;  // The nodes this one ships to.
  int port_flag = absl::GetFlag(FLAGS_port);
  if (!g_nodes.empty()) {
    if (api != "callback" || shards < 1 || g_nodes.size() < 2 || g_index < 0 ||
        static_cast<size_t>(g_index) >= g_nodes.size()) {
      fprintf(stderr,
              "dedup_transport_floor: --nodes needs --api=callback, two nodes or more, an "
              "--index among them and --shards >= 1\n");
      return 2;
    }
    const std::string& own = g_nodes[static_cast<size_t>(g_index)];
    const size_t colon = own.rfind(':');
    if (colon == std::string::npos || !absl::SimpleAtoi(own.substr(colon + 1), &port_flag)) {
      fprintf(stderr, "dedup_transport_floor: --nodes entry '%s' has no port\n", own.c_str());
      return 2;
    }
    g_shards = static_cast<uint32_t>(shards);
    for (size_t i = 0; i < g_nodes.size(); ++i) {
      if (i != static_cast<size_t>(g_index)) others.push_back(g_nodes[i]);
    }
  }
  const bool async = api == "async";
  const bool grpc_health = !async || absl::GetFlag(FLAGS_grpc_health);
  if (grpc_health) grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port_flag), grpc::InsecureServerCredentials(),
                           &port);
  CallbackFloor callback;
  std::unique_ptr<grpc::ServerCompletionQueue> queue;
  if (async) {
    builder.RegisterService(&g_dedup);
    if (!grpc_health) builder.RegisterService(&g_health);
    queue = builder.AddCompletionQueue();
  } else {
    builder.RegisterService(&callback);
  }
  // Every callback instance answers the others' Ship, by either transport.
  ReplicationFloor replication;
  GenericFloor generic;
  if (!async) {
    builder.RegisterService(&replication);
    builder.RegisterCallbackGenericService(&generic);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    fprintf(stderr, "dedup_transport_floor: cannot listen on 127.0.0.1:%d\n", port_flag);
    return 1;
  }
  g_target = absl::StrCat("127.0.0.1:", port);
  if (grpc_health) {
    server->GetHealthCheckService()->SetServingStatus(dedup::v1::Dedup::service_full_name(), true);
  }
  std::unique_ptr<Replicator> replicator;
  if (!others.empty() && absl::GetFlag(FLAGS_ship)) {
    replicator = std::make_unique<Replicator>(others, g_shards,
                                              transport == "stream"     ? Transport::kStream
                                              : transport == "callback" ? Transport::kCallback
                                                                        : Transport::kUnary);
    g_replicator = replicator.get();
  }
  printf("dedup_transport_floor: %s API on %s%s\n", api.c_str(), g_target.c_str(),
         others.empty()
             ? ""
             : absl::StrCat(", node ", g_index, " of ", g_nodes.size(), " over ", shards, " shards",
                            replicator ? absl::StrCat(", shipping by ", transport)
                                       : std::string(", not shipping"))
                   .c_str());
  fflush(stdout);

  std::vector<std::thread> pollers;
  if (async) {
    ServeQueue(queue.get(), /*health=*/!grpc_health);
    for (int i = 0; i < threads; ++i) {
      pollers.emplace_back([q = queue.get()] {
        void* tag = nullptr;
        bool ok = false;
        while (q->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
      });
    }
  }
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGINT, [](int) { g_stop = 1; });
  while (g_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  replicator.reset();  // Answers what still waits for its followers.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  if (async) {
    queue->Shutdown();
    for (std::thread& poller : pollers) poller.join();
  }
  return 0;
}
