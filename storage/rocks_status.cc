#include "storage/rocks_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dedup::storage {

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsInvalidArgument() || status.IsNotSupported()) {
    return absl::InternalError(message);
  }
  return absl::UnavailableError(message);
}

}  // namespace dedup::storage
