#ifndef DEDUP_SERVER_HTTP_ENDPOINT_H_
#define DEDUP_SERVER_HTTP_ENDPOINT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dedup::server {

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse()>;

// What HttpEndpoint decides without I/O, apart so that tests and the fuzzer
// (tests/fuzz/fuzz_http_endpoint.cc) can give it bytes of their choosing.

// Gathers one request head from a connection's bytes as they arrive. Not
// thread-safe; one per connection.
class HttpRequestReader {
 public:
  enum class State {
    kReading,   // No blank line yet: read more.
    kComplete,  // head() is the request; bytes after it are ignored.
    kTooLarge,  // No blank line within the limit: refuse the request.
  };

  // Heads longer than `max_head_bytes`, counting the blank line that ends
  // them, are refused.
  explicit HttpRequestReader(size_t max_head_bytes) : max_head_bytes_(max_head_bytes) {}

  // How many bytes the next read may take: what is left of the limit, so
  // that nothing past it is ever read.
  size_t Wanted() const;

  // Takes the next bytes received, at most Wanted(). Requires kReading.
  // The head ends at the first blank line, whether lines end with "\r\n"
  // or "\n".
  State Add(absl::string_view bytes);

  // The request line and headers, without the blank line that ends them.
  // Requires kComplete.
  absl::string_view head() const { return absl::string_view(received_).substr(0, head_end_); }

  // Every byte taken so far.
  size_t received() const { return received_.size(); }

 private:
  size_t max_head_bytes_;
  std::string received_;
  size_t head_end_ = std::string::npos;
};

// The answer to one request `head` (request line and headers) from
// `routes`, path → handler: 400 unless the request line is
// "METHOD TARGET HTTP/1.x"; 404 when the target's path (what precedes a
// '?') has no route; 405 for a method other than GET and HEAD; otherwise
// the handler's answer. Sets `*head_only` for HEAD.
HttpResponse AnswerHttpRequest(absl::string_view head,
                               const std::map<std::string, HttpHandler>& routes, bool* head_only);

// The bytes sent for `response`: an HTTP/1.1 status line, Content-Type,
// Content-Length, Cache-Control and Connection headers, then the body
// unless `head_only`.
std::string RenderHttpResponse(const HttpResponse& response, bool head_only);

// A small HTTP/1.x server for what operators scrape and probe: /metrics,
// /healthz, /readyz. GET and HEAD only; one request per connection.
//
// One thread polls every connection, so a client that sends its request a
// byte at a time (slowloris) or reads the answer slowly holds a slot, never
// a thread: each connection has a whole-request deadline, from accept to
// the last byte of the answer, and when every slot is taken the oldest
// connection is closed to admit the new one. A probe that sends its request
// at once is therefore answered however many slow clients are connected.
// Handlers run one at a time on that thread; they must be quick.
class HttpEndpoint {
 public:
  using Handler = HttpHandler;

  struct Options {
    // From accept to the last byte of the answer.
    absl::Duration request_deadline = absl::Seconds(5);
    // Connections held at once; past it the oldest is closed.
    int max_connections = 256;
    // Largest request head (request line, headers and the blank line
    // that ends them). A longer one is refused, the connection closed
    // unanswered; no byte past this many is read.
    size_t max_request_bytes = 8192;
  };

  // Serves `routes` (path → handler) on `listen` ("host:port", the host an
  // address or a name; port 0 picks one). UNAVAILABLE if it cannot listen,
  // INVALID_ARGUMENT if an option is below 1.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen,
                                                             std::map<std::string, Handler> routes,
                                                             Options options);
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      const std::string& listen, std::map<std::string, Handler> routes) {
    return Start(listen, std::move(routes), Options());
  }

  // Stops serving: closes the listener and every connection, and waits for
  // a handler that is running.
  ~HttpEndpoint();

  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const { return port_; }

 private:
  struct Connection;
  HttpEndpoint(std::map<std::string, Handler> routes, Options options)
      : routes_(std::move(routes)), options_(options) {}
  void Run();
  // Reads what `connection` sent; answers once its request head is whole.
  // False when the connection is done with (closed by the client, bad, or
  // answered in full).
  bool OnReadable(Connection& connection);
  bool OnWritable(Connection& connection);

  const std::map<std::string, Handler> routes_;
  const Options options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // An eventfd: written to stop Run.
  int port_ = 0;
  std::thread thread_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_HTTP_ENDPOINT_H_
