#ifndef DEDUP_STORAGE_ROCKS_STATUS_H_
#define DEDUP_STORAGE_ROCKS_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rocksdb/status.h"

namespace dedup::storage {

// The storage layer's one translation of RocksDB status, prefixed with
// `what` failed. Nothing RocksDB reports is the caller's fault:
//   - corruption is DATA_LOSS;
//   - InvalidArgument / NotSupported (RocksDB refusing what this layer
//     asked of it) is INTERNAL, a defect here, never the caller's
//     INVALID_ARGUMENT;
//   - everything else (I/O errors, a full disk, busy, aborted, timed out) is
//     a fault of the environment: UNAVAILABLE, so callers retry or fail
//     closed.
// Internal to storage/.
absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_ROCKS_STATUS_H_
