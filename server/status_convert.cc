#include "server/status_convert.h"

#include <string>

namespace dedup::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status ShuttingDownStatus() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down");
}

grpc::Status QueueFullStatus() {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "server busy: its worker queue is full; retry with backoff");
}

std::string StatusCodeName(grpc::StatusCode code) {
  // absl and gRPC codes are one to one, and Abseil spells them as gRPC does.
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

}  // namespace dedup::server
