#include "dedup/client/grpc_status.h"

namespace dedup::client {

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace dedup::client
