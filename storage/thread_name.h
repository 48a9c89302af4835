#ifndef DEDUP_STORAGE_THREAD_NAME_H_
#define DEDUP_STORAGE_THREAD_NAME_H_

#include "absl/strings/string_view.h"

namespace dedup::storage {

// Names the calling thread as `top -H`, `ps -L` and `perf` show it, so that
// an operator can tell dedupd's workers, shippers and sync threads apart.
// Linux keeps 15 bytes of a name: longer ones are cut there.
void NameThisThread(absl::string_view name);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_THREAD_NAME_H_
