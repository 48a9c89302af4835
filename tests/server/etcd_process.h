#ifndef DEDUP_TESTS_SERVER_ETCD_PROCESS_H_
#define DEDUP_TESTS_SERVER_ETCD_PROCESS_H_

// A single-member etcd (Debian's etcd-server) for tests: client and peer
// URLs on 127.0.0.1 at ports free when it starts, data in the test's temp
// directory, stopped by its process id.

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace dedup::server::test {

// PEM files of an etcd serving its client API over mutual TLS.
struct EtcdTlsFiles {
  std::string ca;           // Client certificates must chain to it.
  std::string cert, key;    // etcd's own.
  std::string client_cert;  // A client's, for the readiness check.
  std::string client_key;
};

class EtcdProcess {
 public:
  // Starts etcd (ETCD_PATH, found at configure time) with its data under
  // `dir` and returns once it answers a read, waiting at most ~20 s; with
  // `tls`, its client API requires mutual TLS. Errors carry etcd's log.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(const std::string& dir,
                                                            const EtcdTlsFiles* tls = nullptr);

  // SIGKILLs etcd if it is still running.
  ~EtcdProcess();

  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // host:port of the client API.
  const std::string& endpoint() const { return endpoint_; }
  // SIGTERM, then SIGKILL after 10 s; reaps it.
  void Stop();
  // What etcd has logged so far.
  std::string Log() const;

 private:
  EtcdProcess(pid_t pid, std::string endpoint, std::string log_path)
      : pid_(pid), endpoint_(std::move(endpoint)), log_path_(std::move(log_path)) {}

  pid_t pid_;
  const std::string endpoint_;
  const std::string log_path_;
};

}  // namespace dedup::server::test

#endif  // DEDUP_TESTS_SERVER_ETCD_PROCESS_H_
