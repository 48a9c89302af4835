#ifndef DEDUP_SERVER_HTTP_ENDPOINT_H_
#define DEDUP_SERVER_HTTP_ENDPOINT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct mg_connection;
struct mg_context;

namespace dedup::server {

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// A small HTTP server (civetweb) for what operators scrape and probe:
// /metrics, /healthz, /readyz. Handlers run on civetweb's threads, may run
// concurrently, and must be thread-safe. GET only.
class HttpEndpoint {
 public:
  using Handler = std::function<HttpResponse()>;

  // Serves `routes` (path → handler) on `listen` ("host:port"; port 0
  // picks one). UNAVAILABLE if it cannot listen.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen,
                                                             std::map<std::string, Handler> routes);
  // Stops serving; waits for handlers that are running.
  ~HttpEndpoint();

  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const { return port_; }

 private:
  explicit HttpEndpoint(std::map<std::string, Handler> routes) : routes_(std::move(routes)) {}
  static int Handle(struct mg_connection* connection, void* self);

  const std::map<std::string, Handler> routes_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_HTTP_ENDPOINT_H_
