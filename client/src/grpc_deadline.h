#ifndef DEDUP_CLIENT_SRC_GRPC_DEADLINE_H_
#define DEDUP_CLIENT_SRC_GRPC_DEADLINE_H_

#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dedup::client {

// The deadline to give a gRPC call that has `time_left`. gRPC takes an
// instant of the system clock and measures it on its own clocks, not on the
// client's Clock, so this is the one place the client reads the system
// clock directly: the time left, measured on the client's Clock, from the
// system's now. Infinite time left is no deadline.
inline std::chrono::system_clock::time_point GrpcDeadlineIn(absl::Duration time_left) {
  return absl::ToChronoTime(absl::Now() + time_left);
}

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_SRC_GRPC_DEADLINE_H_
