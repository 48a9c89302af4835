#ifndef DEDUP_SERVER_STATUS_CONVERT_H_
#define DEDUP_SERVER_STATUS_CONVERT_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace dedup::server {

// The one place where an internal status becomes a gRPC status. absl and
// gRPC codes map one to one; DATA_LOSS and INTERNAL from storage are kept
// as they are (they are not the caller's to retry blindly).
grpc::Status ToGrpcStatus(const absl::Status& status);

// The answer to a call that arrives, or cannot be queued, while the server
// drains for shutdown: UNAVAILABLE, so clients retry elsewhere or later.
grpc::Status ShuttingDownStatus();

// The answer to a call whose storage work finds the worker queue full:
// RESOURCE_EXHAUSTED, to retry with backoff.
grpc::Status QueueFullStatus();

// gRPC status codes are 0..kGrpcCodeCount-1 (OK..UNAUTHENTICATED).
inline constexpr int kGrpcCodeCount = static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) + 1;

// The canonical name of a gRPC status code ("INVALID_ARGUMENT"), as the
// `code` label of request metrics; "UNKNOWN" for a value out of range.
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_STATUS_CONVERT_H_
