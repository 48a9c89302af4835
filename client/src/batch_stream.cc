#include "batch_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "dedup/client/grpc_status.h"

namespace dedup::client {
namespace {

absl::Status FromItemError(const v1::Error& error) {
  return absl::Status(static_cast<absl::StatusCode>(error.code()), error.message());
}

}  // namespace

BatchStream::BatchStream(LiveCalls* live, std::function<void(size_t)> on_answered,
                         std::function<void(BatchStream*)> on_done)
    : live_(live), on_answered_(std::move(on_answered)), on_done_(std::move(on_done)) {}

std::shared_ptr<BatchStream> BatchStream::Open(v1::Dedup::Stub* stub, grpc::CompletionQueue* queue,
                                               LiveCalls* live,
                                               std::function<void(size_t)> on_answered,
                                               std::function<void(BatchStream*)> on_done) {
  std::shared_ptr<BatchStream> stream(
      new BatchStream(live, std::move(on_answered), std::move(on_done)));
  {
    absl::MutexLock lock(&stream->mu_);
    stream->self_ = stream;
    stream->out_ = 1;  // The start.
  }
  stream->call_ = stub->PrepareAsyncStream(&stream->context_, queue);
  // Reads and writes wait for the start to complete (OnStarted).
  stream->call_->StartCall(stream->started_op_.Tag());
  return stream;
}

bool BatchStream::Send(v1::BatchRequest request, Waiters waiters) {
  {
    absl::MutexLock lock(&mu_);
    if (broken_ || closing_) return false;
    in_flight_[request.batch_id()] = std::move(waiters);
    outbox_.push_back(std::move(request));
  }
  Pump();
  return true;
}

void BatchStream::Close() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  Pump();
}

void BatchStream::Pump() {
  const v1::BatchRequest* to_write = nullptr;
  bool writes_done = false;
  bool finish = false;
  {
    absl::MutexLock lock(&mu_);
    if (read_over_) {
      // Finish only once no thread is starting a write: gRPC takes no
      // operation on the call after Finish.
      if (finishing_ || starting_ > 0) return;
      finishing_ = true;
      finish = true;
    } else if (!started_ || broken_ || writing_ || writes_done_) {
      return;
    } else if (!outbox_.empty()) {
      writing_ = true;
      to_write = &outbox_.front();
    } else if (closing_) {
      writes_done_ = true;
      writes_done = true;
    } else {
      return;
    }
    ++out_;
    if (!finish) ++starting_;
  }
  if (finish) {
    call_->Finish(&status_, finished_op_.Tag());
    return;
  }
  // std::deque keeps references to its elements valid across push_back.
  if (to_write != nullptr) call_->Write(*to_write, write_op_.Tag());
  if (writes_done) call_->WritesDone(writes_done_op_.Tag());
  {
    absl::MutexLock lock(&mu_);
    --starting_;
  }
  Pump();  // Finish, if the call ended while this was being started.
}

void BatchStream::OnStarted(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    if (ok) {
      started_ = true;
      ++out_;  // The first read.
    } else {
      broken_ = true;
      read_over_ = true;
    }
  }
  if (ok) call_->Read(&response_, read_op_.Tag());
  Pump();  // What was sent before the start, or Finish.
  Returned();
}

void BatchStream::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    outbox_.pop_front();
    writing_ = false;
    // The call is over; a read fails next, and Finish answers the waiters.
    if (!ok) broken_ = true;
  }
  Pump();
  Returned();
}

void BatchStream::OnWritesDoneDone(bool /*ok*/) { Returned(); }

void BatchStream::OnReadDone(bool ok) {
  if (!ok) {
    // The call is over: no answer will come, so nothing more is written.
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      read_over_ = true;
    }
    Pump();
    Returned();
    return;
  }
  v1::BatchResponse response = std::move(response_);
  response_.Clear();
  call_->Read(&response_, read_op_.Tag());  // The same operation, out again.
  Waiters waiters;
  {
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(response.batch_id());
    if (it == in_flight_.end()) return;
    waiters = std::move(it->second);
    in_flight_.erase(it);
  }
  for (size_t i = 0; i < waiters.size(); ++i) {
    if (static_cast<int>(i) >= response.results_size()) {
      waiters[i]->Fire(absl::InternalError("server answered a batch with too few results"));
    } else if (response.results(i).has_error()) {
      waiters[i]->Fire(FromItemError(response.results(i).error()));
    } else {
      waiters[i]->Fire(std::move(*response.mutable_results(i)));
    }
  }
  on_answered_(1);
}

void BatchStream::ExpireOverdue(SteadyTime now) {
  std::vector<std::shared_ptr<Waiter>> overdue;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, waiters] : in_flight_) {
      for (const auto& waiter : waiters) {
        if (!waiter->fired() && waiter->deadline() < now) overdue.push_back(waiter);
      }
    }
  }
  for (const auto& waiter : overdue) {
    waiter->Fire(absl::DeadlineExceededError("no answer from dedupd before the deadline"));
  }
}

void BatchStream::OnFinished(bool /*ok*/) {
  absl::flat_hash_map<uint64_t, Waiters> stranded;
  {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    stranded = std::move(in_flight_);
    in_flight_.clear();
  }
  // A caller the server does not accept is told so: retrying cannot help.
  // Any other end may have come from the connection, and is retried.
  const bool refused = status_.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                       status_.error_code() == grpc::StatusCode::PERMISSION_DENIED;
  const absl::Status error =
      refused ? FromGrpc(status_)
              : absl::UnavailableError(absl::StrCat(
                    "stream to dedupd ended before the answer: ", status_.error_message(),
                    " (code ", static_cast<int>(status_.error_code()), ")"));
  for (auto& [id, waiters] : stranded) {
    for (auto& waiter : waiters) waiter->Fire(error);
  }
  if (!stranded.empty()) on_answered_(stranded.size());
  on_done_(this);
  Returned();
}

void BatchStream::Returned() {
  std::shared_ptr<BatchStream> last;
  {
    absl::MutexLock lock(&mu_);
    --out_;
    if (out_ == 0 && finished_) last = std::move(self_);
  }
  // `last`, if it was the final hold, destroys the stream here.
}

}  // namespace dedup::client
