#include "server/http_endpoint.h"

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace dedup::server {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

const char* ReasonPhrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

// How long accepting pauses after it failed (no descriptor left): the
// listener stays readable meanwhile, and polling it would spin.
constexpr std::chrono::milliseconds kAcceptPause{100};

// A listening socket for "host:port", or -1.
int Listen(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return 0;
  if (local.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  if (local.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  }
  return 0;
}

}  // namespace

size_t HttpRequestReader::Wanted() const { return max_head_bytes_ - received_.size(); }

HttpRequestReader::State HttpRequestReader::Add(absl::string_view bytes) {
  // Only the new bytes, and the 3 before them, can hold the blank line.
  const size_t from = received_.size() < 3 ? 0 : received_.size() - 3;
  received_.append(bytes.data(), bytes.size());
  // The first blank line, whether lines end with "\r\n" or "\n".
  head_end_ = std::min(received_.find("\r\n\r\n", from), received_.find("\n\n", from));
  if (head_end_ != std::string::npos) return State::kComplete;
  return received_.size() >= max_head_bytes_ ? State::kTooLarge : State::kReading;
}

HttpResponse AnswerHttpRequest(absl::string_view head,
                               const std::map<std::string, HttpHandler>& routes, bool* head_only) {
  const absl::string_view request_line = head.substr(0, head.find_first_of("\r\n"));
  const std::vector<absl::string_view> parts = absl::StrSplit(request_line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return {400, "text/plain; charset=utf-8", "bad request\n"};
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  auto it = routes.find(std::string(path));
  if (it == routes.end()) return {404, "text/plain; charset=utf-8", "not found\n"};
  if (parts[0] != "GET" && parts[0] != "HEAD") {
    return {405, "text/plain; charset=utf-8", "GET only\n"};
  }
  *head_only = parts[0] == "HEAD";
  return it->second();
}

std::string RenderHttpResponse(const HttpResponse& response, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", response.code, " ", ReasonPhrase(response.code),
                                 "\r\nContent-Type: ", response.content_type,
                                 "\r\nContent-Length: ", response.body.size(),
                                 "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n");
  if (!head_only) out += response.body;
  return out;
}

struct HttpEndpoint::Connection {
  int fd;
  SteadyTime deadline;
  HttpRequestReader request;
  std::string out;
  size_t sent = 0;
  bool writing = false;
};

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& listen, std::map<std::string, Handler> routes, Options options) {
  if (options.max_connections < 1 || options.max_request_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP endpoint: max_connections and max_request_bytes must be at least 1, got ",
        options.max_connections, " and ", options.max_request_bytes));
  }
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint(std::move(routes), options));
  endpoint->listen_fd_ = Listen(listen);
  if (endpoint->listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP (metrics and probes) on ", listen,
                     " (address in use, or not an address this machine has)"));
  }
  endpoint->port_ = BoundPort(endpoint->listen_fd_);
  endpoint->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (endpoint->wake_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", listen, ": no eventfd"));
  }
  HttpEndpoint* raw = endpoint.get();
  endpoint->thread_ = std::thread([raw] {
    // As storage::NameThisThread would, without linking storage.
    pthread_setname_np(pthread_self(), "http");
    raw->Run();
  });
  return endpoint;
}

HttpEndpoint::~HttpEndpoint() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void HttpEndpoint::Run() {
  std::vector<Connection> connections;
  SteadyTime accept_paused_until{};
  std::vector<pollfd> polled;
  for (;;) {
    SteadyTime now = std::chrono::steady_clock::now();
    const bool accepting = now >= accept_paused_until;
    polled.clear();
    polled.push_back({wake_fd_, POLLIN, 0});
    polled.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    SteadyTime wake_at = now + std::chrono::seconds(1);
    if (!accepting) wake_at = std::min(wake_at, accept_paused_until);
    for (const Connection& c : connections) {
      polled.push_back({c.fd, static_cast<short>(c.writing ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - now);
    if (poll(polled.data(), polled.size(),
             static_cast<int>(std::max<int64_t>(timeout.count() + 1, 0))) < 0 &&
        errno != EINTR) {
      continue;
    }
    if (polled[0].revents != 0) break;
    now = std::chrono::steady_clock::now();
    std::vector<bool> done(connections.size(), false);
    for (size_t i = 0; i < connections.size(); ++i) {
      const short events = polled[i + 2].revents;
      if (events == 0) {
        done[i] = now >= connections[i].deadline;
        continue;
      }
      if (events & (POLLERR | POLLNVAL)) {
        done[i] = true;
      } else {
        done[i] =
            connections[i].writing ? !OnWritable(connections[i]) : !OnReadable(connections[i]);
      }
      if (now >= connections[i].deadline) done[i] = true;
    }
    std::vector<Connection> kept;
    kept.reserve(connections.size() + 1);
    for (size_t i = 0; i < connections.size(); ++i) {
      if (done[i]) {
        close(connections[i].fd);
      } else {
        kept.push_back(std::move(connections[i]));
      }
    }
    connections = std::move(kept);
    if (polled[1].revents & POLLIN) {
      for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
            accept_paused_until = now + kAcceptPause;
          }
          break;
        }
        // Full: the oldest connection, the nearest its deadline, makes room.
        if (static_cast<int>(connections.size()) >= options_.max_connections) {
          close(connections.front().fd);
          connections.erase(connections.begin());
        }
        connections.push_back(
            Connection{fd, now + absl::ToChronoNanoseconds(options_.request_deadline),
                       HttpRequestReader(options_.max_request_bytes), "", 0, false});
      }
    }
  }
  for (const Connection& c : connections) close(c.fd);
}

bool HttpEndpoint::OnReadable(Connection& connection) {
  char buffer[4096];
  for (;;) {
    const size_t wanted = std::min(sizeof(buffer), connection.request.Wanted());
    if (wanted == 0) return false;
    const ssize_t n = recv(connection.fd, buffer, wanted, 0);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    switch (connection.request.Add(absl::string_view(buffer, static_cast<size_t>(n)))) {
      case HttpRequestReader::State::kReading:
        continue;
      case HttpRequestReader::State::kTooLarge:
        return false;
      case HttpRequestReader::State::kComplete:
        break;
    }
    bool head_only = false;
    const HttpResponse response = AnswerHttpRequest(connection.request.head(), routes_, &head_only);
    connection.out = RenderHttpResponse(response, head_only);
    connection.writing = true;
    return OnWritable(connection);
  }
}

bool HttpEndpoint::OnWritable(Connection& connection) {
  while (connection.sent < connection.out.size()) {
    const ssize_t n = send(connection.fd, connection.out.data() + connection.sent,
                           connection.out.size() - connection.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    connection.sent += static_cast<size_t>(n);
  }
  return false;  // Answered in full.
}

}  // namespace dedup::server
