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

std::shared_ptr<BatchStream> BatchStream::Open(v1::Dedup::Stub* stub, LiveCalls* live,
                                               std::function<void(size_t)> on_answered,
                                               std::function<void(BatchStream*)> on_done) {
  std::shared_ptr<BatchStream> stream(
      new BatchStream(live, std::move(on_answered), std::move(on_done)));
  stream->self_ = stream;
  stub->async()->Stream(&stream->context_, stream.get());
  // Writes start on the callers' threads, outside the reactions: without a
  // hold the call could end (and OnDone run) between Pump's decision to
  // write and its StartWrite. Released once no operation can start.
  stream->AddHold();
  stream->StartRead(&stream->response_);
  stream->StartCall();
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
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || writes_done_ || broken_) return;
    if (!outbox_.empty()) {
      writing_ = true;
      to_write = &outbox_.front();
    } else if (closing_) {
      writes_done_ = true;
      writes_done = true;
    } else {
      return;
    }
    starting_ = true;
  }
  // std::deque keeps references to its elements valid across push_back.
  if (to_write != nullptr) StartWrite(to_write);
  if (writes_done) StartWritesDone();
  bool release;
  {
    absl::MutexLock lock(&mu_);
    starting_ = false;
    release = TakeHold();
  }
  if (release) RemoveHold();
}

bool BatchStream::TakeHold() {
  if (hold_released_ || starting_ || !(broken_ || writes_done_)) return false;
  hold_released_ = true;
  return true;
}

void BatchStream::OnWriteDone(bool ok) {
  bool release;
  {
    absl::MutexLock lock(&mu_);
    outbox_.pop_front();
    writing_ = false;
    if (!ok) broken_ = true;  // The call is over; OnDone answers the waiters.
    release = TakeHold();
  }
  if (release) RemoveHold();
  Pump();
}

void BatchStream::OnReadDone(bool ok) {
  if (!ok) {
    // The call is over: no answer will come, so nothing more is written.
    // OnDone follows, once the hold is released.
    bool release;
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      release = TakeHold();
    }
    if (release) RemoveHold();
    return;
  }
  v1::BatchResponse response = std::move(response_);
  response_.Clear();
  StartRead(&response_);
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

void BatchStream::OnDone(const grpc::Status& status) {
  absl::flat_hash_map<uint64_t, Waiters> stranded;
  {
    absl::MutexLock lock(&mu_);
    broken_ = true;
    stranded = std::move(in_flight_);
    in_flight_.clear();
  }
  // A caller the server does not accept is told so: retrying cannot help.
  // Any other end may have come from the connection, and is retried.
  const bool refused = status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                       status.error_code() == grpc::StatusCode::PERMISSION_DENIED;
  const absl::Status error =
      refused ? FromGrpc(status)
              : absl::UnavailableError(absl::StrCat(
                    "stream to dedupd ended before the answer: ", status.error_message(), " (code ",
                    static_cast<int>(status.error_code()), ")"));
  for (auto& [id, waiters] : stranded) {
    for (auto& waiter : waiters) waiter->Fire(error);
  }
  if (!stranded.empty()) on_answered_(stranded.size());
  on_done_(this);
  std::shared_ptr<BatchStream> last = std::move(self_);  // May destroy this on return.
}

}  // namespace dedup::client
