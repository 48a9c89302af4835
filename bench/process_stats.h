#ifndef DEDUP_BENCH_PROCESS_STATS_H_
#define DEDUP_BENCH_PROCESS_STATS_H_

#include <sys/types.h>

#include <cstdint>
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

// CPU seconds all processes together have run (user + nice + system over
// all CPUs, without interrupt and steal time) since boot, from /proc/stat. With the server's and this
// process's CPU it tells how much other work shared the machine during a run.
double MachineBusySeconds();

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_PROCESS_STATS_H_
