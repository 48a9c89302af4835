#ifndef DEDUP_SERVER_STORAGE_MONITOR_H_
#define DEDUP_SERVER_STORAGE_MONITOR_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics.h"
#include "storage/store.h"

namespace dedup::server {

// Watches the store from one background thread: every `interval` it reads
// the store's statistics into the metrics and checks for a RocksDB
// background error, reporting the first one to `on_error` (once).
class StorageMonitor {
 public:
  inline static constexpr size_t kSamplePerShard = 2000;

  // `store` and `metrics` must outlive the monitor.
  StorageMonitor(const storage::Store* store, Metrics* metrics, absl::Duration interval,
                 std::function<void(const absl::Status&)> on_error);
  // Stops the thread.
  ~StorageMonitor();

  StorageMonitor(const StorageMonitor&) = delete;
  StorageMonitor& operator=(const StorageMonitor&) = delete;

  // Refreshes now, on the caller's thread (e.g. before a scrape in tests).
  void Refresh();

 private:
  void Run();

  const storage::Store* const store_;
  Metrics* const metrics_;
  const absl::Duration interval_;
  const std::function<void(const absl::Status&)> on_error_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool error_reported_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_STORAGE_MONITOR_H_
