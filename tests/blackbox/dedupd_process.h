#ifndef DEDUP_TESTS_BLACKBOX_DEDUPD_PROCESS_H_
#define DEDUP_TESTS_BLACKBOX_DEDUPD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "tests/blackbox/dedup_client.h"

namespace dedup::blackbox {

// How a dedupd process ended: an exit code, or the signal that killed it.
struct ExitStatus {
  static ExitStatus Exited(int code) { return {true, code, 0}; }
  static ExitStatus Signaled(int signal) { return {false, 0, signal}; }
  // From the status filled in by waitpid().
  static ExitStatus FromWaitStatus(int wait_status);

  bool exited = false;
  int code = 0;    // When exited.
  int signal = 0;  // When not exited.

  bool operator==(const ExitStatus& other) const {
    return exited == other.exited && code == other.code && signal == other.signal;
  }
  bool operator!=(const ExitStatus& other) const { return !(*this == other); }
};

// "exited with code 2", "killed by signal 9 (Killed)".
std::string Describe(const ExitStatus& status);
// Lets gtest print an ExitStatus in failure messages.
void PrintTo(const ExitStatus& status, std::ostream* os);

// One dedupd child process. Its stdout and stderr both go to one log file.
// The process is SIGKILLed and reaped on destruction if it is still running,
// so a failing test never leaves a server behind.
//
// Not thread-safe: drive it from the test's main thread.
class DedupdProcess {
 public:
  // Starts the dedupd under test with `flags`, writing its output to
  // `log_path`. Fails only when the process cannot be started. The binary
  // is $DEDUPD_BINARY when set (to test another build), else the one built
  // with the tests (DEDUPD_PATH). With `network_namespace`, it runs inside
  // that namespace (`ip netns exec`, which keeps the process id).
  static absl::StatusOr<std::unique_ptr<DedupdProcess>> Spawn(
      const std::vector<std::string>& flags, const std::string& log_path,
      const std::string& network_namespace = "");

  ~DedupdProcess();

  DedupdProcess(const DedupdProcess&) = delete;
  DedupdProcess& operator=(const DedupdProcess&) = delete;

  // Waits up to `timeout` for the process to exit by itself and reaps it.
  // nullopt while it is still running.
  std::optional<ExitStatus> WaitForExit(std::chrono::milliseconds timeout);

  // Sends SIGTERM and waits up to `timeout` for the exit. If the process is
  // still running then, it is SIGKILLed and an error is returned.
  absl::StatusOr<ExitStatus> Terminate(std::chrono::milliseconds timeout);

  // Sends SIGKILL (the process gets no chance to clean up) and reaps it.
  ExitStatus Kill();

  // Everything the process has written to stdout and stderr so far.
  std::string Output() const;

  pid_t pid() const { return pid_; }

 private:
  DedupdProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}

  // Reaps the process if it has exited. Non-blocking.
  std::optional<ExitStatus> Reap();

  const pid_t pid_;
  const std::string log_path_;
  std::optional<ExitStatus> exit_;  // Set once reaped.
};

// What a dedupd that exited by itself left behind.
struct FinishedRun {
  ExitStatus status;
  std::string output;  // stdout and stderr, interleaved.
};

// Runs dedupd with `flags` until it exits by itself (for flags that must
// make it exit, such as --help or a bad config), with its output in
// `log_path`. Fails if it is still running after `timeout` (it is killed).
absl::StatusOr<FinishedRun> RunToExit(const std::vector<std::string>& flags,
                                      const std::string& log_path,
                                      std::chrono::milliseconds timeout);

// A dedupd serving gRPC on 127.0.0.1 at a port of its choosing
// (--listen=127.0.0.1:0 --port_file), with a connected client.
class ServingDedupd {
 public:
  // Starts dedupd on `data_dir` with `flags` added, putting its log and port
  // file in `work_dir`, and returns once it serves and a channel to it is
  // connected (waiting at most ~10 s). Errors carry the server's output.
  static absl::StatusOr<std::unique_ptr<ServingDedupd>> Start(
      const std::string& work_dir, const std::string& data_dir,
      const std::vector<std::string>& flags = {});

  DedupdProcess& process() { return *process_; }
  // A client on the shared channel; thread-safe, as gRPC stubs are.
  DedupClient& client() { return *client_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  int port() const { return port_; }

 private:
  ServingDedupd() = default;

  std::unique_ptr<DedupdProcess> process_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<DedupClient> client_;
  int port_ = 0;
};

// `n` distinct ports the kernel just handed out on 127.0.0.1, for nodes
// whose addresses must be known before any of them starts, so that port 0
// cannot be used. Another process may take one before the node binds it;
// the node then fails to start, clearly.
std::vector<int> FreePorts(int n);

// The path of `ip` (iproute2), or "" when it is not installed.
std::string IpCommand();

// Writes `text` to the file at `path`, replacing it.
void WriteFile(const std::string& path, const std::string& text);
// The contents of the file at `path`, or "" if it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_DEDUPD_PROCESS_H_
