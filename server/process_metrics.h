#ifndef DEDUP_SERVER_PROCESS_METRICS_H_
#define DEDUP_SERVER_PROCESS_METRICS_H_

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace dedup::server {

// Prometheus' standard process metrics, under their standard names so that
// stock dashboards and alerts work: process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds and process_start_time_seconds.
// prometheus-cpp 1.0 has no collector for them, so this one reads /proc at
// every scrape (Linux only). A value that cannot be read is left out of the
// scrape rather than reported as 0. Thread-safe; keeps no state.
class ProcessMetrics final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_PROCESS_METRICS_H_
