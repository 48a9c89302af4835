#ifndef DEDUP_TESTS_COMMON_CLOSING_PORT_H_
#define DEDUP_TESTS_COMMON_CLOSING_PORT_H_

// A port on 127.0.0.1 where nothing serves yet: it takes each connection
// and closes it at once, as a host whose server is down refuses it, and
// counts them, so that a test sees each attempt a client makes to
// connect. Release() frees the port for a real server.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

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

}  // namespace dedup::test

#endif  // DEDUP_TESTS_COMMON_CLOSING_PORT_H_
