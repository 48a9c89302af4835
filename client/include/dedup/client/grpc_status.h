#ifndef DEDUP_CLIENT_GRPC_STATUS_H_
#define DEDUP_CLIENT_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace dedup::client {

// The absl::Status of a finished gRPC call: the same code (absl and gRPC
// codes map one to one) and the same message. OK stays OK.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_GRPC_STATUS_H_
