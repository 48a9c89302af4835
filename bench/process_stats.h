#ifndef DEDUP_BENCH_PROCESS_STATS_H_
#define DEDUP_BENCH_PROCESS_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace dedup::bench {

// CPU seconds (user + system, all threads) used so far by `pid` and, when
// `with_descendants`, by every living process below it (PostgreSQL runs a
// backend process per connection). Read from /proc/<pid>/stat. -1 when the
// process is gone.
double CpuSeconds(pid_t pid, bool with_descendants);

// Resident memory of `pid` in bytes (VmRSS of /proc/<pid>/status); 0 when
// unknown.
uint64_t ResidentBytes(pid_t pid);

// Bytes `path` takes on disk, counted as du does (allocated blocks of every
// file below it, each inode once). 0 when it does not exist. Not
// thread-safe: call from one thread at a time.
uint64_t DiskBytes(const std::string& path);

// CPU seconds this process has used (user + system).
double OwnCpuSeconds();

// The CPU ticks of every process at one moment, to tell how much CPU other
// processes took during a run (the machine may be shared).
class CpuCensus {
 public:
  // Reads /proc/<pid>/stat of every process.
  static CpuCensus Take();

  // CPU seconds used between `before` and this census by every process but
  // this one and `server` (with its descendants when `with_descendants`).
  // A process that started in between counts from zero; one that ended in
  // between is missed, so this is a lower bound.
  double OthersSince(const CpuCensus& before, pid_t server, bool with_descendants) const;

 private:
  struct Entry {
    pid_t ppid = 0;
    uint64_t start = 0;  // Start time in ticks since boot: tells reused pids apart.
    uint64_t ticks = 0;
  };
  std::map<pid_t, Entry> processes_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_PROCESS_STATS_H_
