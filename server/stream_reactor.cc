#include "server/stream_reactor.h"

#include <utility>

#include "server/dedup_service.h"
#include "server/status_convert.h"

namespace dedup::server {

StreamReactor::StreamReactor(DedupService* service, absl::StatusOr<Caller> caller, bool counted)
    : service_(service),
      counted_(counted),
      max_batches_(service->limits().max_stream_batches),
      max_answer_bytes_(service->limits().max_stream_answer_bytes) {
  if (!caller.ok()) {
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
    }
    Finish(ToGrpcStatus(caller.status()));
    return;
  }
  caller_ = *std::move(caller);
  listed_ = service_->AddStream(this);
  bool finish = false;
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    // Streams are closed already, or were closed since AddStream (Close
    // then left the finish to this constructor).
    if (!listed_) {
      closing_ = true;
      final_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, kStreamClosedByShutdown);
    }
    started_ = true;
    finish = TakeFinish();
    status = final_status_;
    if (!finish) ++read_starters_;
  }
  if (finish) {
    Finish(status);
    return;
  }
  StartReadThenRecheck();
}

uint64_t StreamReactor::HeldBytes() const {
  return in_flight_bytes_ + outbox_bytes_ + (writing_ ? outbox_sizes_.front() : 0);
}

bool StreamReactor::UnderBudget() const {
  return in_flight_ + outbox_.size() < max_batches_ && HeldBytes() <= max_answer_bytes_;
}

void StreamReactor::NoteFreed(uint64_t bytes) {
  if (bytes >= kLargeAnswerBytes && service_->memory_release() != nullptr) {
    service_->memory_release()->Freed(bytes);
  }
}

bool StreamReactor::ResumeReading() {
  if (!reading_paused_ || reads_done_ || closing_ || broken_ || !UnderBudget()) return false;
  reading_paused_ = false;
  ++read_starters_;
  return true;
}

void StreamReactor::StartReadThenRecheck() {
  bool start = true;
  bool finish = false;
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    // Reads ended since this thread decided to read (a batch failed, or
    // the Stream was closed): no read is started.
    if (reads_done_ || closing_) {
      start = false;
      --read_starters_;
      finish = TakeFinish();
      status = final_status_;
    }
  }
  if (!start) {
    // As in Answer: past the lock the reactor may be gone, unless this
    // thread took the finish.
    if (finish) Finish(status);
    return;
  }
  StartRead(&request_);
  {
    absl::MutexLock lock(&mu_);
    --read_starters_;
    // Closed since this thread started its read: Finish ends that read
    // (OnReadDone(false)), and no other thread could call it meanwhile.
    if (!TakeFinish()) return;
    status = final_status_;
  }
  Finish(status);
}

void StreamReactor::OnReadDone(bool ok) {
  if (!ok) {
    {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
    }
    MaybeFinish();
    return;
  }
  // Taken out first: once reading may resume (from Answer on a worker, as
  // soon as in_flight_ drops), gRPC may write the next message into
  // request_.
  v1::BatchRequest request = std::move(request_);
  request_.Clear();
  const uint64_t request_bytes = request.ByteSizeLong();
  absl::Status size = service_->auth()->Recheck(caller_);
  if (size.ok()) size = CheckBatchSize(request);
  if (!size.ok()) {
    {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      if (final_status_.ok()) final_status_ = ToGrpcStatus(size);
    }
    MaybeFinish();
    return;
  }
  bool read_more = false;
  bool dropped = false;
  {
    absl::MutexLock lock(&mu_);
    // Closed, failed or even finished while this read was outstanding (a
    // read that Finish was to end may still complete with a message): the
    // batch is left unanswered, which tells the client to send it again
    // elsewhere.
    dropped = closing_ || reads_done_ || finished_;
    if (dropped) {
      reads_done_ = true;
    } else {
      ++in_flight_;
      in_flight_bytes_ += request_bytes;
      read_more = UnderBudget();
      reading_paused_ = !read_more;
      // Until the next read is started, no thread that answers this batch
      // may finish the call: StartRead after Finish is not allowed.
      if (read_more) ++read_starters_;
    }
  }
  if (dropped) {
    MaybeFinish();
    return;
  }
  const RequestStart start = NowForLatency();
  service_->metrics()->RequestStarted();
  auto answer = [this, start, request_bytes](v1::BatchResponse response, std::string ns) {
    auto send = [this, start, request_bytes, ns](v1::BatchResponse response,
                                                 const absl::Status& synced) {
      const grpc::Status status = synced.ok() ? grpc::Status::OK : ToGrpcStatus(synced);
      service_->RecordRequest(Method::kStream, ns, start, status);
      if (status.ok()) {
        Answer(std::move(response), request_bytes);
      } else {
        Fail(status, request_bytes);
      }
    };
    if (!service_->store()->SyncsInGroups()) {
      send(std::move(response), absl::OkStatus());
      return;
    }
    // The answer leaves only once what it says is synced; the batch stays
    // in flight meanwhile, which keeps the call open.
    service_->store()->AfterSync(
        [send, response = std::move(response)](absl::Status synced) mutable {
          send(std::move(response), synced);
        });
  };
  const grpc::Status queued = service_->SubmitBatch(
      caller_, std::make_shared<const v1::BatchRequest>(std::move(request)), std::move(answer));
  if (!queued.ok()) {
    // The batches already running are still answered before the status.
    service_->RecordRequest(Method::kStream, "", start, queued);
    {
      absl::MutexLock lock(&mu_);
      --in_flight_;
      in_flight_bytes_ -= request_bytes;
      reads_done_ = true;
      if (read_more) --read_starters_;  // That read is not started.
      if (final_status_.ok()) final_status_ = queued;
    }
    MaybeFinish();
    return;
  }
  if (read_more) StartReadThenRecheck();
}

void StreamReactor::Answer(v1::BatchResponse response, uint64_t request_bytes) {
  const v1::BatchResponse* to_write = nullptr;
  bool resume_reading = false;
  bool finish = false;
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    in_flight_bytes_ -= request_bytes;
    if (!broken_) {
      const uint64_t bytes = response.ByteSizeLong();
      outbox_.push_back(std::move(response));
      outbox_sizes_.push_back(bytes);
      outbox_bytes_ += bytes;
      if (!writing_) {
        writing_ = true;
        to_write = &outbox_.front();
      }
    }
    resume_reading = ResumeReading();
    finish = TakeFinish();
    status = final_status_;
  }
  // Past this point another thread may finish the call and gRPC delete the
  // reactor, unless this thread is to start a read (read_starters_ holds
  // the finish off until it has) or took the finish itself. A write it
  // starts does not keep the reactor: the write may be done, and the call
  // finished, on another thread before StartWrite returns. So no
  // MaybeFinish() here: it would lock mu_ of a reactor that may be gone.
  // std::deque keeps references to its elements valid across push_back.
  if (to_write != nullptr) StartWrite(to_write);
  if (resume_reading) StartReadThenRecheck();
  if (finish) Finish(status);
}

void StreamReactor::Fail(const grpc::Status& status, uint64_t request_bytes) {
  bool finish = false;
  grpc::Status final_status;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    in_flight_bytes_ -= request_bytes;
    reads_done_ = true;
    if (final_status_.ok()) final_status_ = status;
    finish = TakeFinish();
    final_status = final_status_;
  }
  // As in Answer: the reactor may be gone once the lock is released,
  // unless this thread took the finish.
  if (finish) Finish(final_status);
}

void StreamReactor::OnWriteDone(bool ok) {
  const v1::BatchResponse* to_write = nullptr;
  bool resume_reading = false;
  bool finish = false;
  grpc::Status status;
  uint64_t freed = 0;
  {
    absl::MutexLock lock(&mu_);
    outbox_.pop_front();
    freed = outbox_sizes_.front();
    outbox_bytes_ -= freed;
    outbox_sizes_.pop_front();
    if (!ok) {
      broken_ = true;
      outbox_.clear();
      outbox_sizes_.clear();
      freed += outbox_bytes_;
      outbox_bytes_ = 0;
    }
    if (!outbox_.empty()) {
      to_write = &outbox_.front();
    } else {
      writing_ = false;
    }
    resume_reading = ResumeReading();
    finish = TakeFinish();
    status = final_status_;
  }
  // Before the calls below: once they are made the reactor may be gone.
  NoteFreed(freed);
  if (to_write != nullptr) StartWrite(to_write);
  if (resume_reading) StartReadThenRecheck();
  if (finish) Finish(status);
}

void StreamReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  broken_ = true;
  final_status_ = grpc::Status::CANCELLED;
}

std::optional<grpc::Status> StreamReactor::Close(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (closing_ || finished_) return std::nullopt;
  closing_ = true;
  if (final_status_.ok()) final_status_ = status;
  // The constructor has yet to decide between its first read and Finish.
  if (!started_ || !TakeFinish()) return std::nullopt;
  return final_status_;
}

bool StreamReactor::TakeFinish() {
  // Closing, a read may be outstanding: Finish ends it (OnReadDone(false)).
  const bool reads_over = reads_done_ || closing_ || (broken_ && reading_paused_);
  if (finished_ || !reads_over || in_flight_ > 0 || writing_ || read_starters_ > 0) return false;
  finished_ = true;
  return true;
}

void StreamReactor::MaybeFinish() {
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!TakeFinish()) return;
    status = final_status_;
  }
  Finish(status);
}

void StreamReactor::OnDone() {
  if (listed_) service_->RemoveStream(this);
  if (counted_) service_->StreamClosed(caller_);
  delete this;
}

}  // namespace dedup::server
