#ifndef DEDUP_TESTS_COMMON_ETCD_PROCESS_H_
#define DEDUP_TESTS_COMMON_ETCD_PROCESS_H_

// A single-member etcd (Debian's etcd-server) for tests: client and peer
// URLs on 127.0.0.1 (or a test network's address) at ports free when it starts, data in the test's
// temp directory, stopped by its process id. Shared by the tests of the etcd client (tests/server)
// and of replicated clusters (tests/blackbox).

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dedup::test {

// PEM files of an etcd serving its client API over mutual TLS.
struct EtcdTlsFiles {
  std::string ca;           // Client certificates must chain to it.
  std::string cert, key;    // etcd's own.
  std::string client_cert;  // A client's, for the readiness check.
  std::string client_key;
};

// Not thread-safe: drive it from the test's main thread.
class EtcdProcess {
 public:
  // Starts etcd (ETCD_PATH, found at configure time) with its data under
  // `dir` and returns once it answers a read, waiting at most ~20 s; with
  // `tls`, its client API requires mutual TLS. It listens on `host`, an
  // address of the network namespace it starts in (the caller's). Errors
  // carry etcd's log.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(const std::string& dir,
                                                            const EtcdTlsFiles* tls = nullptr,
                                                            const std::string& host = "127.0.0.1");

  // SIGKILLs etcd if it is still running.
  ~EtcdProcess();

  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // host:port of the client API; the same across Stop and Restart.
  const std::string& endpoint() const { return endpoint_; }
  // SIGTERM, then SIGKILL after 10 s; reaps it. Its data and ports are
  // kept for Restart.
  void Stop();
  // Starts etcd again after Stop, on the same data directory, ports and
  // TLS files, and returns once it answers a read (at most ~20 s), with
  // every key it had. FAILED_PRECONDITION while it is running.
  absl::Status Restart();
  bool running() const { return pid_ != 0; }
  // What etcd has logged so far, across restarts.
  std::string Log() const;

 private:
  EtcdProcess(std::string dir, std::string host, int client_port, int peer_port,
              const EtcdTlsFiles* tls);

  // Spawns etcd and waits until it answers.
  absl::Status Launch();

  // Constant after construction.
  const std::string dir_;
  const std::string host_;
  const int peer_port_;
  const std::optional<EtcdTlsFiles> tls_;
  const std::string endpoint_;
  const std::string log_path_;

  pid_t pid_ = 0;  // 0: not running.
};

}  // namespace dedup::test

#endif  // DEDUP_TESTS_COMMON_ETCD_PROCESS_H_
