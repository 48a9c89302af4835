#ifndef DEDUP_CLIENT_SRC_STREAM_BATCHER_H_
#define DEDUP_CLIENT_SRC_STREAM_BATCHER_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batch_stream.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "scheduler.h"
#include "waiter.h"

namespace dedup::client {

// Coalesces operations from any number of threads into batches on a shared
// Stream, much as Nagle's algorithm coalesces small TCP writes: an
// operation that finds fewer than `max_in_flight` batches unanswered leaves
// at once; the operations that arrive while that many are unanswered wait
// and leave together when one of those is answered, when they make
// `max_batch`, or `window` after the first of them arrived, whichever is
// soonest. So a call on a quiet client costs no window, and a busy client
// sends full batches. A broken
// stream is replaced on the next batch. Overdue operations are answered
// DEADLINE_EXCEEDED by a sweep every few milliseconds. The window and the
// sweeps are timed on the scheduler's clock. Thread-safe.
class StreamBatcher {
 public:
  // `stub`, `completions` (where the streams' operations complete, on a
  // CompletionThread) and `scheduler` must outlive the batcher, and the
  // scheduler must run no more of its tasks by the time the batcher is
  // destroyed.
  StreamBatcher(v1::Dedup::Stub* stub, grpc::CompletionQueue* completions, Scheduler* scheduler,
                LiveCalls* live, absl::Duration window, int max_batch, int max_in_flight);
  // Half-closes the stream and waits until every stream has ended.
  ~StreamBatcher();

  // Sends `op`; `waiter` gets its answer.
  void Send(v1::Operation op, std::shared_ptr<Waiter> waiter);

 private:
  struct Batch {
    v1::BatchRequest request;
    BatchStream::Waiters waiters;
  };
  void FlushDue();
  void Sweep();
  // Takes the queued operations as one batch.
  Batch TakeBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dispatch(Batch batch) ABSL_LOCKS_EXCLUDED(mu_);
  void StreamEnded(BatchStream* stream);
  // `n` dispatched batches are over (answered, or their stream ended).
  void Answered(size_t n);

  v1::Dedup::Stub* const stub_;
  grpc::CompletionQueue* const completions_;
  Scheduler* const scheduler_;
  LiveCalls* const live_calls_;
  const absl::Duration window_;
  const int max_batch_;
  const size_t max_in_flight_;

  absl::Mutex mu_;
  std::vector<v1::Operation> queued_ ABSL_GUARDED_BY(mu_);
  BatchStream::Waiters queued_waiters_ ABSL_GUARDED_BY(mu_);
  bool flush_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  // Batches dispatched and not yet answered, on every stream.
  size_t unanswered_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_batch_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::shared_ptr<BatchStream> current_ ABSL_GUARDED_BY(mu_);
  // Streams not yet ended (the current one and broken ones finishing).
  std::vector<std::shared_ptr<BatchStream>> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_STREAM_BATCHER_H_
