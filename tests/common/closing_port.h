#ifndef DEDUP_TESTS_COMMON_CLOSING_PORT_H_
#define DEDUP_TESTS_COMMON_CLOSING_PORT_H_

// A port on 127.0.0.1 where nothing serves yet: it takes each connection
// and closes it at once, as a host whose server is down refuses it, and
// counts them, so that a test sees each attempt a client makes to
// connect. Release() frees the port for a real server; RefuseThenServe
// times a client's reconnection to a node that comes back.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dedup::test {

class ClosingPort {
 public:
  ClosingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    const int on = 1;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ < 0 || setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 || listen(fd_, 64) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return;
    }
    port_ = ntohs(address.sin_port);
    closer_ = std::thread([this] { Close(); });
  }
  ~ClosingPort() { Release(); }
  ClosingPort(const ClosingPort&) = delete;
  ClosingPort& operator=(const ClosingPort&) = delete;

  // 0 if the port could not be opened.
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  // Connections taken and closed so far.
  int attempts() const { return attempts_.load(); }

  // Stops taking connections and frees the port.
  void Release() {
    stop_ = true;
    if (closer_.joinable()) closer_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  void Close() {
    while (!stop_.load()) {
      pollfd ready{fd_, POLLIN, 0};
      if (poll(&ready, 1, 20) <= 0) continue;
      const int connection = accept(fd_, nullptr, nullptr);
      if (connection < 0) continue;
      close(connection);
      ++attempts_;
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> attempts_{0};
  std::thread closer_;
};

// What RefuseThenServe saw.
struct Reconnection {
  int refused = 0;      // Attempts refused before the port served.
  absl::Duration took;  // From serving until a call got through.
  grpc::Status last;    // The last call's answer (UNIMPLEMENTED: through).
};

// Makes `call` (a call over the channel under test, with a short deadline)
// until `port` has refused `attempts` connections, then serves dedup.v1 on
// the port, every method answering UNIMPLEMENTED, as a node that is back,
// and makes `call` until it does not fail UNAVAILABLE, for up to 30 s.
inline absl::StatusOr<Reconnection> RefuseThenServe(ClosingPort& port, int attempts,
                                                    const std::function<grpc::Status()>& call) {
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (port.attempts() < attempts && absl::Now() < give_up) {
    call();
    absl::SleepFor(absl::Milliseconds(5));
  }
  Reconnection seen;
  seen.refused = port.attempts();
  if (seen.refused < attempts) {
    return absl::DeadlineExceededError(
        absl::StrCat("the channel stopped trying to connect after ", seen.refused, " attempts"));
  }
  port.Release();
  v1::Dedup::Service service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(port.address(), grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat("could not listen on ", port.address(), " again"));
  }
  const absl::Time back = absl::Now();
  seen.last = call();
  while (seen.last.error_code() == grpc::StatusCode::UNAVAILABLE &&
         absl::Now() - back < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(5));
    seen.last = call();
  }
  seen.took = absl::Now() - back;
  server->Shutdown();
  return seen;
}

}  // namespace dedup::test

#endif  // DEDUP_TESTS_COMMON_CLOSING_PORT_H_
