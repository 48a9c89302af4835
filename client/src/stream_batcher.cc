#include "stream_batcher.h"

#include <algorithm>
#include <utility>

namespace dedup::client {
namespace {

constexpr absl::Duration kSweepInterval = absl::Milliseconds(5);
// How long closing waits for servers to end their side of the streams
// before it cancels them.
constexpr absl::Duration kCloseGrace = absl::Milliseconds(500);

}  // namespace

StreamBatcher::StreamBatcher(v1::Dedup::Stub* stub, grpc::CompletionQueue* completions,
                             Scheduler* scheduler, LiveCalls* live, absl::Duration window,
                             int max_batch, int max_in_flight)
    : stub_(stub),
      completions_(completions),
      scheduler_(scheduler),
      live_calls_(live),
      window_(window),
      max_batch_(std::max(max_batch, 1)),
      max_in_flight_(static_cast<size_t>(std::max(max_in_flight, 1))) {
  scheduler_->After(kSweepInterval, [this] { Sweep(); });
}

StreamBatcher::~StreamBatcher() {
  std::vector<std::shared_ptr<BatchStream>> live;
  {
    absl::MutexLock lock(&mu_);
    live = live_;
  }
  for (const auto& stream : live) stream->Close();
  live.clear();
  const absl::Condition all_ended(
      +[](std::vector<std::shared_ptr<BatchStream>>* streams) { return streams->empty(); }, &live_);
  {
    absl::MutexLock lock(&mu_);
    // A server that hangs never ends its side of the stream; nothing waits
    // for its answers any more (the client's calls are over by now).
    if (mu_.AwaitWithTimeout(all_ended, kCloseGrace)) return;
    live = live_;
  }
  for (const auto& stream : live) stream->Cancel();
  live.clear();
  absl::MutexLock lock(&mu_);
  mu_.Await(all_ended);
}

void StreamBatcher::Send(v1::Operation op, std::shared_ptr<Waiter> waiter) {
  Batch full;
  {
    absl::MutexLock lock(&mu_);
    queued_.push_back(std::move(op));
    queued_waiters_.push_back(std::move(waiter));
    if (unanswered_ < max_in_flight_ || static_cast<int>(queued_.size()) >= max_batch_) {
      full = TakeBatch();
    } else if (!flush_scheduled_) {
      flush_scheduled_ = true;
      scheduler_->After(window_, [this] { FlushDue(); });
    }
  }
  if (!full.waiters.empty()) Dispatch(std::move(full));
}

StreamBatcher::Batch StreamBatcher::TakeBatch() {
  ++unanswered_;
  Batch batch;
  batch.request.set_batch_id(next_batch_id_++);
  for (auto& op : queued_) *batch.request.add_operations() = std::move(op);
  batch.waiters = std::move(queued_waiters_);
  queued_.clear();
  queued_waiters_.clear();
  return batch;
}

void StreamBatcher::FlushDue() {
  Batch batch;
  {
    absl::MutexLock lock(&mu_);
    flush_scheduled_ = false;
    if (queued_.empty()) return;
    batch = TakeBatch();
  }
  Dispatch(std::move(batch));
}

void StreamBatcher::Dispatch(Batch batch) {
  // A stream that broke since it was made current refuses; open another.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<BatchStream> stream;
    {
      absl::MutexLock lock(&mu_);
      if (current_ == nullptr || attempt > 0) {
        current_ = BatchStream::Open(
            stub_, completions_, live_calls_, [this](size_t n) { Answered(n); },
            [this](BatchStream* s) { StreamEnded(s); });
        live_.push_back(current_);
      }
      stream = current_;
    }
    if (stream->Send(batch.request, batch.waiters)) return;
  }
  for (auto& waiter : batch.waiters) {
    waiter->Fire(absl::UnavailableError("cannot open a stream to dedupd"));
  }
  Answered(1);
}

void StreamBatcher::Answered(size_t n) {
  Batch next;
  {
    absl::MutexLock lock(&mu_);
    unanswered_ -= std::min(n, unanswered_);
    // Room in the air again: what waited for it leaves now.
    if (unanswered_ >= max_in_flight_ || queued_.empty()) return;
    next = TakeBatch();
  }
  Dispatch(std::move(next));
}

void StreamBatcher::StreamEnded(BatchStream* stream) {
  absl::MutexLock lock(&mu_);
  if (current_.get() == stream) current_.reset();
  live_.erase(std::remove_if(live_.begin(), live_.end(),
                             [stream](const auto& s) { return s.get() == stream; }),
              live_.end());
}

void StreamBatcher::Sweep() {
  std::vector<std::shared_ptr<BatchStream>> live;
  {
    absl::MutexLock lock(&mu_);
    live = live_;
  }
  const SteadyTime now = scheduler_->clock().SteadyNow();
  for (const auto& stream : live) stream->ExpireOverdue(now);
  scheduler_->After(kSweepInterval, [this] { Sweep(); });
}

}  // namespace dedup::client
