#ifndef DEDUP_BENCH_POSTGRES_DRIVER_H_
#define DEDUP_BENCH_POSTGRES_DRIVER_H_

#include <memory>
#include <string>

#include "driver.h"
#include "workload.h"

namespace dedup::bench {

struct PostgresDriverOptions {
  // libpq connection string, e.g. "host=127.0.0.1 port=5432 user=postgres".
  std::string conninfo;
  // The session's synchronous_commit: "on" (commit waits for the WAL flush)
  // or "off" (it does not; a crash may lose the last moments).
  std::string synchronous_commit = "on";
};

// Drives PostgreSQL with `INSERT ... ON CONFLICT DO NOTHING` into a table
// whose primary key is the claim key, one connection per caller; a request
// of B claims is one INSERT of B rows (one transaction). Compiled only when
// libpq is found (see CMakeLists.txt).
std::unique_ptr<Driver> MakePostgresDriver(const PostgresDriverOptions& options,
                                           const Workload& workload);

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_POSTGRES_DRIVER_H_
