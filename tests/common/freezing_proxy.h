#ifndef DEDUP_TESTS_COMMON_FREEZING_PROXY_H_
#define DEDUP_TESTS_COMMON_FREEZING_PROXY_H_

// A TCP proxy on 127.0.0.1 in front of another port, whose connections can
// be frozen: Freeze() stops every connection open at that moment from
// passing bytes either way while it stays open, as a network path that
// drops packets does (a partition, a frozen VM, a stateful firewall that
// forgot the flow). Connections made later pass as before, as after the
// path heals. No root, no network namespace: for a test of how a client
// notices a connection that went silent.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace dedup::test {

class FreezingProxy {
 public:
  // Forwards to 127.0.0.1:`target_port`.
  explicit FreezingProxy(int target_port) : target_port_(target_port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = Loopback(0);
    socklen_t length = sizeof(address);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(fd_, 64) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return;
    }
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~FreezingProxy() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    absl::MutexLock lock(&mu_);
    for (auto& pipe : pipes_) pipe->pump.join();
    if (fd_ >= 0) close(fd_);
  }
  FreezingProxy(const FreezingProxy&) = delete;
  FreezingProxy& operator=(const FreezingProxy&) = delete;

  // 0 if the port could not be opened.
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  // Every connection open now passes nothing more, and stays open.
  void Freeze() {
    absl::MutexLock lock(&mu_);
    for (auto& pipe : pipes_) pipe->frozen = true;
  }
  // Connections taken so far.
  int connections() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(pipes_.size());
  }

 private:
  struct Pipe {
    int client = -1;
    int server = -1;
    std::atomic<bool> frozen{false};
    std::thread pump;
  };

  static sockaddr_in Loopback(int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    return address;
  }

  void Accept() {
    while (!stop_.load()) {
      pollfd ready{fd_, POLLIN, 0};
      if (poll(&ready, 1, 20) <= 0) continue;
      const int client = accept(fd_, nullptr, nullptr);
      if (client < 0) continue;
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      const sockaddr_in target = Loopback(target_port_);
      if (server < 0 ||
          connect(server, reinterpret_cast<const sockaddr*>(&target), sizeof(target)) != 0) {
        close(client);
        if (server >= 0) close(server);
        continue;
      }
      auto pipe = std::make_unique<Pipe>();
      pipe->client = client;
      pipe->server = server;
      Pipe* raw = pipe.get();
      pipe->pump = std::thread([this, raw] { Pump(raw); });
      absl::MutexLock lock(&mu_);
      pipes_.push_back(std::move(pipe));
    }
  }

  // Copies bytes both ways until either side closes, the proxy stops, or
  // the pipe is frozen; a frozen pipe holds its sockets open, unread,
  // until the proxy stops.
  void Pump(Pipe* pipe) {
    char buffer[16384];
    bool open = true;
    while (open && !stop_.load()) {
      if (pipe->frozen.load()) {
        usleep(10'000);
        continue;
      }
      pollfd ready[2] = {{pipe->client, POLLIN, 0}, {pipe->server, POLLIN, 0}};
      if (poll(ready, 2, 20) <= 0 || pipe->frozen.load()) continue;
      for (int side = 0; side < 2 && open; ++side) {
        if ((ready[side].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const int from = side == 0 ? pipe->client : pipe->server;
        const int to = side == 0 ? pipe->server : pipe->client;
        const ssize_t got = read(from, buffer, sizeof(buffer));
        if (got <= 0) {
          open = false;
          break;
        }
        for (ssize_t sent = 0; sent < got;) {
          const ssize_t put = write(to, buffer + sent, static_cast<size_t>(got - sent));
          if (put <= 0) {
            open = false;
            break;
          }
          sent += put;
        }
      }
    }
    close(pipe->client);
    close(pipe->server);
  }

  const int target_port_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Pipe>> pipes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::test

#endif  // DEDUP_TESTS_COMMON_FREEZING_PROXY_H_
