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
// the store's statistics into the metrics and checks whether the store
// accepts writes. While the disk is full (RESOURCE_EXHAUSTED) it asks the
// store to recover, so writes resume without a restart once space is freed.
// Each change of the store's health is reported to `on_change`: the error
// (RESOURCE_EXHAUSTED: out of space; anything else: failed until restart),
// or OK after a recovery.
class StorageMonitor {
 public:
  inline static constexpr size_t kSamplePerShard = 2000;

  // `store` and `metrics` must outlive the monitor.
  StorageMonitor(storage::Store* store, Metrics* metrics, absl::Duration interval,
                 std::function<void(const absl::Status&)> on_change);
  // Stops the thread.
  ~StorageMonitor();

  StorageMonitor(const StorageMonitor&) = delete;
  StorageMonitor& operator=(const StorageMonitor&) = delete;

  // Refreshes now, on the caller's thread (e.g. before a scrape in tests).
  void Refresh();

 private:
  void Run();

  storage::Store* const store_;
  Metrics* const metrics_;
  const absl::Duration interval_;
  const std::function<void(const absl::Status&)> on_change_;

  // One refresh at a time, so that changes are reported in order. Held
  // across storage reads and DB::Resume: only Refresh takes it.
  absl::Mutex refresh_mu_;
  absl::StatusCode reported_ ABSL_GUARDED_BY(refresh_mu_) = absl::StatusCode::kOk;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_STORAGE_MONITOR_H_
