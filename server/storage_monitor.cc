#include "server/storage_monitor.h"

#include <utility>

namespace dedup::server {

StorageMonitor::StorageMonitor(const storage::Store* store, Metrics* metrics,
                               absl::Duration interval,
                               std::function<void(const absl::Status&)> on_error)
    : store_(store), metrics_(metrics), interval_(interval), on_error_(std::move(on_error)) {
  thread_ = std::thread([this] { Run(); });
}

StorageMonitor::~StorageMonitor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void StorageMonitor::Refresh() {
  metrics_->RecordStorage(store_->Stats(kSamplePerShard));
  absl::Status error = store_->BackgroundError();
  if (error.ok()) return;
  {
    absl::MutexLock lock(&mu_);
    if (error_reported_) return;
    error_reported_ = true;
  }
  on_error_(error);
}

void StorageMonitor::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_);
      if (stopping_) return;
    }
    Refresh();
  }
}

}  // namespace dedup::server
