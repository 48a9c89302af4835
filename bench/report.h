#ifndef DEDUP_BENCH_REPORT_H_
#define DEDUP_BENCH_REPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "load_runner.h"
#include "workload.h"

namespace dedup::bench {

// Everything one run reports besides the measurements themselves.
struct RunContext {
  std::string system;   // dedupd, redis, postgres
  std::string variant;  // e.g. buffered, fsync, everysec, sync_on
  std::string label;
  std::string description;  // Driver::Describe()
  pid_t server_pid = 0;
  uint64_t server_rss_bytes = 0;  // After the run; 0: unknown.
  std::string data_dir;
  uint64_t data_bytes = 0;  // du of data_dir after the run; 0: unknown.
};

// One JSON object on one line (the schema is in bench/README.md).
std::string ToJson(const RunContext& context, const Workload& workload, const RunResult& result);

// A few aligned lines for a human.
std::string ToTable(const RunContext& context, const Workload& workload, const RunResult& result);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_REPORT_H_
