#ifndef DEDUP_CLIENT_SRC_LIVE_CALLS_H_
#define DEDUP_CLIENT_SRC_LIVE_CALLS_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dedup::client {

// Counts objects that hold a grpc::ClientContext (a call, and through it
// the channel), so that the client can wait for the last of them to be
// destroyed before it drops its channel.
//
// Why: these objects are destroyed on the client's completion thread
// (completion_thread.h), when gRPC returns a call's last operation. The
// channels must not lose their last reference there, and the completion
// queue may shut down only once no call is left on it. Waiting here keeps
// the channel's last reference on the thread that destroys the client, and
// lets it shut the queue down after.
class LiveCalls {
 public:
  // Held as the *first* member of an object that owns a ClientContext:
  // members are destroyed in reverse order, so the count drops only after
  // the context is gone.
  class Token {
   public:
    explicit Token(LiveCalls* calls) : calls_(calls) {
      absl::MutexLock lock(&calls_->mu_);
      ++calls_->live_;
    }
    ~Token() {
      absl::MutexLock lock(&calls_->mu_);
      --calls_->live_;
    }
    Token(const Token&) = delete;
    Token& operator=(const Token&) = delete;

   private:
    LiveCalls* const calls_;
  };

  // Blocks until no Token is alive.
  void WaitForNone() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* live) { return *live == 0; }, &live_));
  }

 private:
  absl::Mutex mu_;
  int live_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_LIVE_CALLS_H_
