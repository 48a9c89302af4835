#ifndef DEDUP_CLIENT_SRC_BATCH_STREAM_H_
#define DEDUP_CLIENT_SRC_BATCH_STREAM_H_

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "dedup/client/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "live_calls.h"
#include "waiter.h"

namespace dedup::client {

// One open Dedup.Stream call carrying many batches. Batches are written in
// order, one write outstanding at a time; answers are matched by batch_id.
// When the call ends, every batch still waiting is answered UNAVAILABLE
// (the client retries those), or with the call's own status when the
// server refused the caller (UNAUTHENTICATED, PERMISSION_DENIED). Keeps itself alive until gRPC's
// OnDone; holders keep a shared_ptr. Thread-safe.
class BatchStream final : public grpc::ClientBidiReactor<v1::BatchRequest, v1::BatchResponse>,
                          public std::enable_shared_from_this<BatchStream> {
 public:
  using Waiters = std::vector<std::shared_ptr<Waiter>>;

  // Opens the call. `on_answered(n)` runs (without locks held) each time n
  // sent batches are over: 1 when an answer arrives, and the number left
  // unanswered when the call ends. `on_done` runs once, from OnDone, when
  // the call is over.
  static std::shared_ptr<BatchStream> Open(v1::Dedup::Stub* stub, LiveCalls* live,
                                           std::function<void(size_t)> on_answered,
                                           std::function<void(BatchStream*)> on_done);

  // Queues `request`, whose i-th operation answers waiters[i]. Returns
  // false, leaving the waiters untouched, when the stream can take no more
  // (broken or closing).
  bool Send(v1::BatchRequest request, Waiters waiters);

  // Half-closes once queued batches are written; answers still arrive.
  void Close();

  // Answers DEADLINE_EXCEEDED to waiters whose deadline is before `now`.
  void ExpireOverdue(SteadyTime now);

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnWritesDoneDone(bool /*ok*/) override {}
  void OnDone(const grpc::Status& status) override;

 private:
  BatchStream(LiveCalls* live, std::function<void(size_t)> on_answered,
              std::function<void(BatchStream*)> on_done);
  // Starts the next write, or the half-close, if nothing is being written.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);
  // True, once, when no operation can start any more (broken, or
  // half-closed) and none is being started: the caller then releases the
  // hold Open took, with the lock released.
  bool TakeHold() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LiveCalls::Token live_;  // First: outlives context_ (see live_calls.h).
  grpc::ClientContext context_;
  v1::BatchResponse response_;  // Owned by the outstanding read.
  const std::function<void(size_t)> on_answered_;
  const std::function<void(BatchStream*)> on_done_;
  std::shared_ptr<BatchStream> self_;  // Released in OnDone.

  absl::Mutex mu_;
  std::deque<v1::BatchRequest> outbox_ ABSL_GUARDED_BY(mu_);  // front() may be in write.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool starting_ ABSL_GUARDED_BY(mu_) = false;  // Pump is starting a write or the half-close.
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<uint64_t, Waiters> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_BATCH_STREAM_H_
