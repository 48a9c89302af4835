#ifndef DEDUP_CLIENT_SRC_NODE_CONNECTION_H_
#define DEDUP_CLIENT_SRC_NODE_CONNECTION_H_

#include <memory>
#include <string>

#include "dedup/v1/dedup.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/security/credentials.h"
#include "live_calls.h"
#include "scheduler.h"
#include "stream_batcher.h"
#include "waiter.h"

namespace dedup::client {

// Everything the client keeps for one dedupd node: its channel, stubs and,
// when coalescing, the batcher of its shared Stream. Thread-safe.
class NodeConnection {
 public:
  struct Options {
    std::shared_ptr<grpc::ChannelCredentials> credentials;  // Null: plaintext.
    bool coalesce = true;
    absl::Duration batch_window;
    int max_batch = 64;
    int max_batches_in_flight = 4;
    absl::Duration max_reconnect_backoff;  // Zero: gRPC's default.
    absl::Duration keepalive_time;         // Zero: no keepalive.
    absl::Duration keepalive_timeout;
    // Required: the queue of a CompletionThread, where every call of the
    // connection completes; it must outlive the connection.
    grpc::CompletionQueue* completions = nullptr;
  };

  // `scheduler` and `live` must outlive the connection; the scheduler must
  // run no more tasks by the time it is destroyed. Deadlines are read on
  // the scheduler's clock.
  NodeConnection(std::string address, const Options& options, Scheduler* scheduler,
                 LiveCalls* live);

  // Sends one attempt of `op`; `waiter` gets the answer.
  void Send(const v1::Operation& op, std::shared_ptr<Waiter> waiter);

  const std::string& address() const { return address_; }
  v1::Dedup::Stub* stub() { return stub_.get(); }
  grpc::health::v1::Health::Stub* health() { return health_.get(); }

  // Closes the batcher's streams and waits for them to end.
  void Close() { batcher_.reset(); }

 private:
  template <typename Request, typename Response, typename Prepare, typename Put>
  void Unary(const Request& request, std::shared_ptr<Waiter> waiter, Prepare prepare, Put put);
  void SendUnary(const v1::Operation& op, std::shared_ptr<Waiter> waiter);

  const std::string address_;
  const Clock& clock_;
  LiveCalls* const live_calls_;
  grpc::CompletionQueue* const completions_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Dedup::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::unique_ptr<StreamBatcher> batcher_;
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_NODE_CONNECTION_H_
