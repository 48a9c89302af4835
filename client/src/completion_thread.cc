#include "completion_thread.h"

#include <pthread.h>

namespace dedup::client {

CompletionThread::CompletionThread() : thread_([this] { Run(); }) {}

CompletionThread::~CompletionThread() {
  queue_.Shutdown();
  thread_.join();
}

void CompletionThread::Run() {
  pthread_setname_np(pthread_self(), "dedup-client-cq");
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
    auto* op = static_cast<CompletionOp*>(tag);
    op->starts_.load(std::memory_order_acquire);  // See CompletionOp::Tag.
    op->Completed(ok);
  }
}

}  // namespace dedup::client
