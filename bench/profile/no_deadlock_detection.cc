// An LD_PRELOAD shim for experiments: turns off absl::Mutex deadlock
// detection in the process it is loaded into.
//
// Debian 12 builds Abseil without NDEBUG, so its absl::Mutex runs deadlock
// detection (a lock graph updated on every acquisition made while holding
// another lock) in every program by default. A profile of dedupd under
// batched load shows GraphCycles::InsertEdge among the top symbols: the
// storage layer holds one stripe lock per key of a batch. Loading this shim
// into dedupd (bench/profile/profile-dedupd does) measures what that costs,
// without changing dedupd itself.
#include "absl/synchronization/mutex.h"

namespace {

__attribute__((constructor)) void TurnOffDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace
