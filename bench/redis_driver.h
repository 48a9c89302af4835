#ifndef DEDUP_BENCH_REDIS_DRIVER_H_
#define DEDUP_BENCH_REDIS_DRIVER_H_

#include <memory>
#include <string>

#include "driver.h"
#include "workload.h"

namespace dedup::bench {

struct RedisDriverOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  int timeout_ms = 10000;
};

// Drives Redis with `SET key owner NX EX ttl` (ttl: the lease rounded up to
// seconds), one connection per caller; a request of B claims is a pipeline
// B deep. Compiled only when hiredis is found (see CMakeLists.txt).
std::unique_ptr<Driver> MakeRedisDriver(const RedisDriverOptions& options,
                                        const Workload& workload);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_REDIS_DRIVER_H_
