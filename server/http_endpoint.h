#ifndef DEDUP_SERVER_HTTP_ENDPOINT_H_
#define DEDUP_SERVER_HTTP_ENDPOINT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dedup::server {

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

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
  using Handler = std::function<HttpResponse()>;

  struct Options {
    // From accept to the last byte of the answer.
    absl::Duration request_deadline = absl::Seconds(5);
    // Connections held at once; past it the oldest is closed.
    int max_connections = 256;
    // Largest request head (request line and headers) read.
    size_t max_request_bytes = 8192;
  };

  // Serves `routes` (path → handler) on `listen` ("host:port", the host an
  // address or a name; port 0 picks one). UNAVAILABLE if it cannot listen.
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
  HttpResponse Answer(const std::string& head, bool* head_only) const;

  const std::map<std::string, Handler> routes_;
  const Options options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // An eventfd: written to stop Run.
  int port_ = 0;
  std::thread thread_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_HTTP_ENDPOINT_H_
