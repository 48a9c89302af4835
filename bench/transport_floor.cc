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
// Stops on SIGTERM or SIGINT.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

ABSL_FLAG(int, port, 0, "Port on 127.0.0.1 (0: the kernel picks; the chosen port is printed).");
ABSL_FLAG(std::string, api, "callback", "callback (as dedupd serves) or async.");
ABSL_FLAG(int, threads, 1, "--api=async: threads polling the one completion queue.");
ABSL_FLAG(bool, grpc_health, false,
          "--api=async: serve health with gRPC's default service (a callback service, so "
          "gRPC's callback threads exist and poll too) instead of on the queue.");

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

void CannedClaim(ClaimResponse* response) {
  response->set_outcome(ClaimResponse::ACQUIRED);
  response->set_token(1);
  response->set_lease_expires_ms(1);
}

void CannedBatch(const BatchRequest& request, BatchResponse* response) {
  response->set_batch_id(request.batch_id());
  for (int i = 0; i < request.operations_size(); ++i) {
    CannedClaim(response->add_results()->mutable_claim());
  }
}

// A single node without placement: the client sends everything here.
void CannedTopology(TopologyResponse* response) {
  response->set_shard_count(16);
  response->add_nodes(g_target);
  response->set_version(1);
}

class CallbackFloor final : public dedup::v1::Dedup::CallbackService {
  grpc::ServerUnaryReactor* Claim(grpc::CallbackServerContext* context, const ClaimRequest*,
                                  ClaimResponse* response) override {
    CannedClaim(response);
    return Done(context);
  }
  grpc::ServerUnaryReactor* Batch(grpc::CallbackServerContext* context, const BatchRequest* request,
                                  BatchResponse* response) override {
    CannedBatch(*request, response);
    return Done(context);
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

  // One batch read, answered, written; then the next read.
  class StreamReactor final : public grpc::ServerBidiReactor<BatchRequest, BatchResponse> {
   public:
    StreamReactor() { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) return Finish(grpc::Status::OK);
      response_.Clear();
      CannedBatch(request_, &response_);
      StartWrite(&response_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) return Finish(grpc::Status::OK);
      StartRead(&request_);
    }
    void OnDone() override { delete this; }

   private:
    BatchRequest request_;
    BatchResponse response_;
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
      "  dedup_transport_floor --api=callback|async [--threads=1] [--port=0]");
  absl::ParseCommandLine(argc, argv);
  const std::string api = absl::GetFlag(FLAGS_api);
  const int threads = absl::GetFlag(FLAGS_threads);
  if ((api != "callback" && api != "async") || threads < 1 || threads > 64) {
    fprintf(stderr, "dedup_transport_floor: --api callback or async, --threads 1..64\n");
    return 2;
  }
  const bool async = api == "async";
  const bool grpc_health = !async || absl::GetFlag(FLAGS_grpc_health);
  if (grpc_health) grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port)),
                           grpc::InsecureServerCredentials(), &port);
  CallbackFloor callback;
  std::unique_ptr<grpc::ServerCompletionQueue> queue;
  if (async) {
    builder.RegisterService(&g_dedup);
    if (!grpc_health) builder.RegisterService(&g_health);
    queue = builder.AddCompletionQueue();
  } else {
    builder.RegisterService(&callback);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    fprintf(stderr, "dedup_transport_floor: cannot listen on 127.0.0.1:%d\n",
            absl::GetFlag(FLAGS_port));
    return 1;
  }
  g_target = absl::StrCat("127.0.0.1:", port);
  if (grpc_health) {
    server->GetHealthCheckService()->SetServingStatus(dedup::v1::Dedup::service_full_name(), true);
  }
  printf("dedup_transport_floor: %s API on %s\n", api.c_str(), g_target.c_str());
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
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  if (async) {
    queue->Shutdown();
    for (std::thread& poller : pollers) poller.join();
  }
  return 0;
}
