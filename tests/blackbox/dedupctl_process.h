#ifndef DEDUP_TESTS_BLACKBOX_DEDUPCTL_PROCESS_H_
#define DEDUP_TESTS_BLACKBOX_DEDUPCTL_PROCESS_H_

// dedupctl run as an operator runs it, as a child process: to its end, or
// in the background while the test does something else (a shard move the
// test crashes a node in the middle of). Its stdout and stderr go to
// files of their own, so that progress lines and reasons can be told
// apart.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/blackbox/dedupd_process.h"

namespace dedup::blackbox {

// What a dedupctl that ended left behind.
struct DedupctlRun {
  std::string command;  // The command line, for messages.
  ExitStatus status;
  std::string out;
  std::string err;
  absl::Duration took;  // From start to exit.
};

// "dedupctl cluster add-node ... exited with code 0 after 3.2s", then its
// stdout and stderr.
std::string Describe(const DedupctlRun& run);

// One dedupctl child process, SIGKILLed and reaped on destruction if it is
// still running.
//
// Not thread-safe: drive it from the test's main thread.
class DedupctlProcess {
 public:
  // Starts dedupctl with `args`, its stdout in `<log_prefix>.out` and its
  // stderr in `<log_prefix>.err`. Fails only when it cannot be started. The
  // binary is $DEDUPCTL_BINARY when set, else the one built with the tests
  // (DEDUPCTL_PATH).
  static absl::StatusOr<std::unique_ptr<DedupctlProcess>> Spawn(
      const std::vector<std::string>& args, const std::string& log_prefix);

  ~DedupctlProcess();

  DedupctlProcess(const DedupctlProcess&) = delete;
  DedupctlProcess& operator=(const DedupctlProcess&) = delete;

  // Waits up to `timeout` for it to exit and reaps it; nullopt while it
  // still runs.
  std::optional<DedupctlRun> Wait(absl::Duration timeout);
  // What it has written to stdout so far.
  std::string Out() const;
  const std::string& command() const { return command_; }

 private:
  DedupctlProcess(pid_t pid, std::string command, std::string log_prefix, absl::Time started)
      : pid_(pid),
        command_(std::move(command)),
        log_prefix_(std::move(log_prefix)),
        started_(started) {}

  std::optional<ExitStatus> Reap();

  const pid_t pid_;
  const std::string command_;
  const std::string log_prefix_;
  const absl::Time started_;
  std::optional<DedupctlRun> run_;  // Once reaped.
};

// Runs dedupctl with `args` to its end. Fails if it cannot be started, or
// if it still runs after `timeout` (it is killed; the error carries its
// output).
absl::StatusOr<DedupctlRun> RunDedupctl(const std::vector<std::string>& args,
                                        const std::string& log_prefix, absl::Duration timeout);

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_DEDUPCTL_PROCESS_H_
