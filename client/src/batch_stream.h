#ifndef DEDUP_CLIENT_SRC_BATCH_STREAM_H_
#define DEDUP_CLIENT_SRC_BATCH_STREAM_H_

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "completion_thread.h"
#include "dedup/client/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "live_calls.h"
#include "waiter.h"

namespace dedup::client {

// One open Dedup.Stream call carrying many batches, on gRPC's asynchronous
// API: its operations complete on a CompletionThread. Batches are written
// in order, one write outstanding at a time; answers are matched by
// batch_id. When the call ends, every batch still waiting is answered
// UNAVAILABLE (the client retries those), or with the call's own status
// when the server refused the caller (UNAUTHENTICATED, PERMISSION_DENIED).
// Keeps itself alive until the call is over and gRPC has returned every
// operation; holders keep a shared_ptr. Thread-safe.
class BatchStream final {
 public:
  using Waiters = std::vector<std::shared_ptr<Waiter>>;

  // Opens the call, whose operations complete on `queue`'s thread.
  // `on_answered(n)` runs (without locks held) each time n sent batches are
  // over: 1 when an answer arrives, and the number left unanswered when the
  // call ends. `on_done` runs once, on the completion thread, when the call
  // is over.
  static std::shared_ptr<BatchStream> Open(v1::Dedup::Stub* stub, grpc::CompletionQueue* queue,
                                           LiveCalls* live, std::function<void(size_t)> on_answered,
                                           std::function<void(BatchStream*)> on_done);

  // Queues `request`, whose i-th operation answers waiters[i]. Returns
  // false, leaving the waiters untouched, when the stream can take no more
  // (broken or closing).
  bool Send(v1::BatchRequest request, Waiters waiters);

  // Half-closes once queued batches are written; answers still arrive.
  void Close();
  // Ends the call now, answered or not: for a server that does not close
  // its side after Close (one that hangs).
  void Cancel() { context_.TryCancel(); }

  // Answers DEADLINE_EXCEEDED to waiters whose deadline is before `now`.
  void ExpireOverdue(SteadyTime now);

 private:
  // The tag of one kind of operation; at most one of each kind is in flight.
  class Op final : public CompletionOp {
   public:
    Op(BatchStream* stream, void (BatchStream::*completed)(bool))
        : stream_(stream), completed_(completed) {}
    void Completed(bool ok) override { (stream_->*completed_)(ok); }

   private:
    BatchStream* const stream_;
    void (BatchStream::*const completed_)(bool);
  };

  BatchStream(LiveCalls* live, std::function<void(size_t)> on_answered,
              std::function<void(BatchStream*)> on_done);

  void OnStarted(bool ok);
  void OnReadDone(bool ok);
  void OnWriteDone(bool ok);
  void OnWritesDoneDone(bool ok);
  void OnFinished(bool ok);

  // Starts the next write, or the half-close, if nothing is being written;
  // and Finish, once the call is over and nothing is being started.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);
  // Counts an operation of gRPC back; releases the stream's hold on itself
  // once the call is finished and no operation is out.
  void Returned() ABSL_LOCKS_EXCLUDED(mu_);

  const LiveCalls::Token live_;  // First: outlives context_ (see live_calls.h).
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::BatchRequest, v1::BatchResponse>> call_;
  v1::BatchResponse response_;  // Owned by the outstanding read.
  grpc::Status status_;         // Set by Finish.
  const std::function<void(size_t)> on_answered_;
  const std::function<void(BatchStream*)> on_done_;
  Op started_op_{this, &BatchStream::OnStarted};
  Op read_op_{this, &BatchStream::OnReadDone};
  Op write_op_{this, &BatchStream::OnWriteDone};
  Op writes_done_op_{this, &BatchStream::OnWritesDoneDone};
  Op finished_op_{this, &BatchStream::OnFinished};

  absl::Mutex mu_;
  std::shared_ptr<BatchStream> self_ ABSL_GUARDED_BY(mu_);    // Released by Returned.
  std::deque<v1::BatchRequest> outbox_ ABSL_GUARDED_BY(mu_);  // front() may be in write.
  int out_ ABSL_GUARDED_BY(mu_) = 0;                          // Operations gRPC has not returned.
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  // Nothing more is written: a write failed, or the call is over.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // The call is over (the start or a read failed): no read is out, and
  // Finish may start.
  bool read_over_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // Finish started.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;   // Finish returned.
  int starting_ ABSL_GUARDED_BY(mu_) = 0;        // Threads starting a write or the half-close.
  absl::flat_hash_map<uint64_t, Waiters> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_BATCH_STREAM_H_
