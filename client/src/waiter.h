#ifndef DEDUP_CLIENT_SRC_WAITER_H_
#define DEDUP_CLIENT_SRC_WAITER_H_

#include <atomic>
#include <functional>
#include <utility>

#include "absl/status/statusor.h"
#include "dedup/client/clock.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup::client {

using OpCallback = std::function<void(absl::StatusOr<v1::OperationResult>)>;

// One attempt of one operation waiting for its answer. Whichever comes
// first wins — the server's answer, a broken stream, the deadline — and the
// callback runs exactly once. Thread-safe.
class Waiter {
 public:
  Waiter(SteadyTime deadline, OpCallback done) : deadline_(deadline), done_(std::move(done)) {}

  void Fire(absl::StatusOr<v1::OperationResult> result) {
    if (fired_.exchange(true)) return;
    OpCallback done = std::move(done_);
    done(std::move(result));
  }
  bool fired() const { return fired_.load(); }
  SteadyTime deadline() const { return deadline_; }

 private:
  const SteadyTime deadline_;
  OpCallback done_;
  std::atomic<bool> fired_{false};
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_WAITER_H_
