#ifndef DEDUP_CLIENT_SRC_COMPLETION_THREAD_H_
#define DEDUP_CLIENT_SRC_COMPLETION_THREAD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "grpcpp/completion_queue.h"
#include "grpcpp/support/async_unary_call.h"
#include "grpcpp/support/status.h"

namespace dedup::client {

// An operation of gRPC's asynchronous API in flight: its tag on the queue.
class CompletionOp {
 public:
  virtual ~CompletionOp() = default;
  // Runs on the completion thread once gRPC is done with the operation.
  virtual void Completed(bool ok) = 0;

  // The tag to start the operation with, each time it is started. gRPC
  // orders what the starting thread did before it with the completion, but
  // in its core library, where ThreadSanitizer cannot see it; this release,
  // and the acquire on the completion thread, show it that edge.
  void* Tag() {
    starts_.fetch_add(1, std::memory_order_release);
    return this;
  }

 private:
  friend class CompletionThread;
  std::atomic<uint64_t> starts_{0};
};

// One completion queue and the one thread that polls it and runs every
// CompletionOp's Completed. Where this is the only thread waiting in gRPC's
// poller (a process that also serves gRPC's callback API has that API's
// threads too), each event wakes it once. gRPC's callback API instead
// keeps two threads that hand the polling to each other, several wake-ups
// per message. Thread-safe.
class CompletionThread {
 public:
  CompletionThread();
  // Shuts the queue down and joins the thread. Every call started on the
  // queue must be over (its last CompletionOp completed) by then.
  ~CompletionThread();

  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;

  grpc::CompletionQueue* queue() { return &queue_; }
  // Whether the caller runs on this thread (in a CompletionOp).
  bool IsCurrent() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Run();

  grpc::CompletionQueue queue_;
  std::thread thread_;
};

// Starts the unary call `reader` was prepared for and runs `done` with its
// status on the completion thread of the queue it was prepared on, once the
// answer is in `*response`. The call's context, request and response must
// live until `done` has run (`done` may own them).
template <typename Response>
void StartUnary(std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader,
                Response* response, std::function<void(const grpc::Status&)> done) {
  class Finished final : public CompletionOp {
   public:
    Finished(std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader,
             std::function<void(const grpc::Status&)> done)
        : done_(std::move(done)), reader_(std::move(reader)) {}
    void Completed(bool /*ok*/) override {
      reader_.reset();  // Before done_, which may own the call's context.
      done_(status_);
      delete this;
    }
    grpc::ClientAsyncResponseReader<Response>* reader() { return reader_.get(); }
    grpc::Status* status() { return &status_; }

   private:
    std::function<void(const grpc::Status&)> done_;
    grpc::Status status_;
    std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader_;
  };
  auto* finished = new Finished(std::move(reader), std::move(done));
  finished->reader()->StartCall();
  finished->reader()->Finish(response, finished->status(), finished->Tag());
}

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_COMPLETION_THREAD_H_
