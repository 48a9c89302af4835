#ifndef DEDUP_SERVER_STATUS_CONVERT_H_
#define DEDUP_SERVER_STATUS_CONVERT_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace dedup::server {

// The one place where an internal status becomes a gRPC status. absl and
// gRPC codes map one to one; DATA_LOSS and INTERNAL from storage are kept
// as they are (they are not the caller's to retry blindly).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_STATUS_CONVERT_H_
