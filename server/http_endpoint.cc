#include "server/http_endpoint.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "civetweb.h"

namespace dedup::server {
namespace {

int SendText(mg_connection* connection, const HttpResponse& response) {
  mg_printf(connection,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            response.code, mg_get_response_code_text(connection, response.code),
            response.content_type.c_str(), response.body.size());
  mg_write(connection, response.body.data(), response.body.size());
  return response.code;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& listen, std::map<std::string, Handler> routes) {
  static const unsigned initialized = mg_init_library(0);
  (void)initialized;
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint(std::move(routes)));
  const char* options[] = {"listening_ports",    listen.c_str(), "num_threads", "4",
                           "request_timeout_ms", "10000",        nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  // civetweb logs to stderr by default; a failed start is reported below.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  endpoint->context_ = mg_start(&callbacks, nullptr, options);
  if (endpoint->context_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP (metrics and probes) on ", listen,
                     " (address in use, or not an address this machine has)"));
  }
  mg_set_request_handler(endpoint->context_, "/", &HttpEndpoint::Handle, endpoint.get());
  mg_server_port ports[1];
  if (mg_get_server_ports(endpoint->context_, 1, ports) > 0) endpoint->port_ = ports[0].port;
  return endpoint;
}

HttpEndpoint::~HttpEndpoint() {
  if (context_ != nullptr) mg_stop(context_);
}

int HttpEndpoint::Handle(mg_connection* connection, void* self) {
  const mg_request_info* request = mg_get_request_info(connection);
  const auto* endpoint = static_cast<const HttpEndpoint*>(self);
  auto it = endpoint->routes_.find(request->local_uri != nullptr ? request->local_uri : "");
  if (it == endpoint->routes_.end()) {
    return SendText(connection, {404, "text/plain; charset=utf-8", "not found\n"});
  }
  if (std::strcmp(request->request_method, "GET") != 0 &&
      std::strcmp(request->request_method, "HEAD") != 0) {
    return SendText(connection, {405, "text/plain; charset=utf-8", "GET only\n"});
  }
  return SendText(connection, it->second());
}

}  // namespace dedup::server
