#ifndef DEDUP_BENCH_DEDUPD_PROCESS_H_
#define DEDUP_BENCH_DEDUPD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dedup::bench {

// A dedupd the bench starts for itself (the smoke test, or a run with
// --spawn_dedupd): 127.0.0.1 port 0, metrics off, data in a fresh
// directory under $TMPDIR (or /tmp) that is removed when it stops.
class DedupdProcess {
 public:
  // Starts `binary` with `extra_flags` and waits (up to 20 s) until it has
  // written its port.
  static absl::StatusOr<std::unique_ptr<DedupdProcess>> Start(
      const std::string& binary, const std::vector<std::string>& extra_flags);

  // SIGTERM, then SIGKILL after 15 s; removes the temp directory.
  ~DedupdProcess();

  DedupdProcess(const DedupdProcess&) = delete;
  DedupdProcess& operator=(const DedupdProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& target() const { return target_; }
  const std::string& data_dir() const { return data_dir_; }

 private:
  DedupdProcess(std::string temp_dir, pid_t pid);

  const std::string temp_dir_;
  const std::string data_dir_;
  pid_t pid_;
  std::string target_;
};

}  // namespace dedup::bench

#endif  // DEDUP_BENCH_DEDUPD_PROCESS_H_
