#include "server/storage_monitor.h"

#include <utility>

#include "storage/thread_name.h"

namespace dedup::server {

StorageMonitor::StorageMonitor(storage::Store* store, Metrics* metrics, absl::Duration interval,
                               std::function<void(const absl::Status&)> on_change)
    : store_(store), metrics_(metrics), interval_(interval), on_change_(std::move(on_change)) {
  thread_ = std::thread([this] {
    storage::NameThisThread("storage-monitor");
    Run();
  });
}

StorageMonitor::~StorageMonitor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void StorageMonitor::Refresh() {
  absl::MutexLock lock(&refresh_mu_);
  absl::Status health = store_->BackgroundError();
  // Out of space: RocksDB can resume once space is freed. A failed attempt
  // (still no space) leaves things as they were until the next refresh.
  if (absl::IsResourceExhausted(health) && store_->Recover().ok()) health = absl::OkStatus();
  metrics_->RecordStorage(store_->Stats(kSamplePerShard));
  if (health.code() == reported_) return;
  reported_ = health.code();
  on_change_(health);
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
