#ifndef DEDUP_SERVER_STREAM_REACTOR_H_
#define DEDUP_SERVER_STREAM_REACTOR_H_

#include <cstdint>
#include <deque>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "server/authorization.h"

namespace dedup::server {

class DedupService;

// How a Stream ends when the server shuts down (DedupService::CloseStreams).
inline constexpr char kStreamClosedByShutdown[] =
    "dedupd is shutting down: the Stream is closed, and the batches it left unanswered may be "
    "sent again";

// One Stream call: reads batches, runs them through DedupService::Submit
// (on the worker pool, or inline on the reading gRPC thread), and writes
// each answer as soon as it is ready (so answers may overtake each other;
// batch_id tells them apart). Backpressure, not buffering: reading pauses
// while limits().max_stream_batches batches are unanswered (running or
// waiting to be written) or while the call holds more than
// max_stream_answer_bytes (requests read and not yet answered, answers
// waiting for a client that reads slowly, and gRPC's encoded copy of the
// one being written), so neither a fast writer nor a client that never
// reads can make the server hold more than that and one batch. Deletes
// itself in OnDone, which gRPC calls only after Finish, and Finish comes
// only once no batch is running.
//
// Lifetime: once Finish is called, OnDone may delete the reactor at any
// moment, on another thread. So whether to finish is decided inside the
// same critical section as the change that allows it, and a thread touches
// no member after leaving a critical section unless what it decided there
// keeps the call open (a write it started, a read it resumed) or it is the
// one thread that decided to finish. The service holds every reactor that
// is not done in a set (AddStream in the constructor, RemoveStream in
// OnDone), so that Close may be called until OnDone.
class StreamReactor final : public grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse> {
 public:
  // Serves `caller`; when it is an error, finishes the call with it at once.
  // `counted`: the call holds one of the service's open-stream slots, given
  // back in OnDone.
  StreamReactor(DedupService* service, absl::StatusOr<Caller> caller, bool counted);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // Reads no more, and ends the call with `status` (or an error it already
  // met) once the batches already read are answered and written. When that
  // is now, returns the status: the caller must call Finish with it, and
  // the reactor waits for that. Called with the service's set of Streams
  // locked, so the reactor cannot be done meanwhile.
  std::optional<grpc::Status> Close(const grpc::Status& status);

 private:
  // Called from a worker, or inline from OnReadDone, when a batch's answer
  // is ready.
  // `request_bytes`: the size of the batch's request, counted since it was
  // read.
  void Answer(v1::BatchResponse response, uint64_t request_bytes);
  // Instead of Answer, for a batch whose answer must not be sent: ends the
  // call with `status` once what is already answered is written.
  void Fail(const grpc::Status& status, uint64_t request_bytes);
  // Whether the call is due to finish: reads are over and nothing runs or
  // waits to be written. The first caller that sees it due gets true (and
  // must call Finish(final_status_ as read here) after unlocking); every
  // later caller gets false.
  bool TakeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes the call if it is due. Only from OnReadDone: gRPC runs OnDone
  // only after a reaction has returned, so the reactor outlives the call.
  // A worker thread has no such guarantee (see Answer).
  void MaybeFinish();
  // What the call holds now: requests in flight, answers waiting, and the
  // encoded copy of the one being written.
  uint64_t HeldBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether another batch may be read now.
  bool UnderBudget() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the service's MemoryRelease of a large answer freed.
  void NoteFreed(uint64_t bytes);

  // Takes reading up again if it paused and the budget allows it; returns
  // whether the caller must start a read (StartReadThenRecheck).
  bool ResumeReading() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the read that this thread decided on under mu_ (raising
  // read_starters_ there), unless reads have ended since, then lowers
  // read_starters_ and finishes the call if it became due meanwhile.
  void StartReadThenRecheck();

  DedupService* const service_;
  const bool counted_;
  const uint32_t max_batches_;
  const uint64_t max_answer_bytes_;
  Caller caller_;
  bool listed_ = false;       // In the service's set; set before any other thread sees it.
  v1::BatchRequest request_;  // Owned by the outstanding read.

  absl::Mutex mu_;
  std::deque<v1::BatchResponse> outbox_ ABSL_GUARDED_BY(mu_);  // front() is being written.
  uint64_t outbox_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<uint64_t> outbox_sizes_ ABSL_GUARDED_BY(mu_);  // Bytes of each outbox_ entry.
  uint32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Requests of in_flight_.
  bool reading_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // The constructor is past its first read.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // Close was called: no more reads.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // Cancelled or a write failed.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Threads that decided to start a read and have yet to: the call does not
  // finish meanwhile, since a read started after Finish is not allowed and
  // Finish lets gRPC delete the reactor under that thread.
  uint32_t read_starters_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_STREAM_REACTOR_H_
