#ifndef DEDUP_TESTS_COMMON_HTTP_SCRAPE_H_
#define DEDUP_TESTS_COMMON_HTTP_SCRAPE_H_

// What a test reads from a dedupd's HTTP port: one plain GET, and the
// Prometheus text of /metrics as series and values. Header-only, for the
// server tests and the black-box tests alike.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace dedup::test {

struct HttpReply {
  int code = 0;  // 0: no answer.
  std::string body;
};

// A TCP connection to 127.0.0.1:port, or -1.
inline int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A plain HTTP/1.0 GET to 127.0.0.1:port.
inline HttpReply HttpGet(int port, const std::string& path) {
  HttpReply reply;
  const int fd = ConnectLoopback(port);
  if (fd < 0) return reply;
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return reply;
  }
  std::string raw;
  char buffer[8192];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) raw.append(buffer, n);
  close(fd);
  const size_t space = raw.find(' ');
  const size_t body = raw.find("\r\n\r\n");
  if (space == std::string::npos || body == std::string::npos) return reply;
  if (!absl::SimpleAtoi(raw.substr(space + 1, 3), &reply.code)) return reply;
  reply.body = raw.substr(body + 4);
  return reply;
}

// Whether the peer of connection `fd` ended it (EOF or reset) within
// `timeout`; bytes it sends first are read and dropped.
inline bool ClosedByPeerWithin(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd readable{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&readable, 1, static_cast<int>(left.count())) <= 0) return false;
    char buffer[256];
    if (read(fd, buffer, sizeof(buffer)) <= 0) return true;
  }
}

// Series → value from the Prometheus text format; labels as printed
// (prometheus-cpp sorts them by name).
inline std::map<std::string, double> ParseMetrics(const std::string& text) {
  std::map<std::string, double> series;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space != absl::string_view::npos && absl::SimpleAtod(line.substr(space + 1), &value)) {
      series[std::string(line.substr(0, space))] = value;
    }
  }
  return series;
}

}  // namespace dedup::test

#endif  // DEDUP_TESTS_COMMON_HTTP_SCRAPE_H_
