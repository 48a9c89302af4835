#ifndef DEDUP_SERVER_STREAM_REACTOR_H_
#define DEDUP_SERVER_STREAM_REACTOR_H_

#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dedup/v1/dedup.grpc.pb.h"

namespace dedup::server {

class DedupService;

// One Stream call: reads batches, runs up to kMaxInFlight of them at once
// on the worker pool, and writes each answer as soon as it is ready (so
// answers may overtake each other; batch_id tells them apart). Reading
// pauses while kMaxInFlight batches are running: a fast client cannot queue
// unbounded work. Deletes itself in OnDone, which gRPC calls only after
// Finish, and Finish comes only once no batch is running.
class StreamReactor final : public grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse> {
 public:
  static constexpr int kMaxInFlight = 16;

  explicit StreamReactor(DedupService* service);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Called from a worker when a batch's answer is ready.
  void Answer(v1::BatchResponse response);
  // Finishes the call when reads are over and nothing runs or waits to be
  // written. Call without mu_ held.
  void MaybeFinish();

  DedupService* const service_;
  v1::BatchRequest request_;  // Owned by the outstanding read.

  absl::Mutex mu_;
  std::deque<v1::BatchResponse> outbox_ ABSL_GUARDED_BY(mu_);  // front() is being written.
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool reading_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // Cancelled or a write failed.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_STREAM_REACTOR_H_
