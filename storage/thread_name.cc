#include "storage/thread_name.h"

#include <pthread.h>

#include <string>

namespace dedup::storage {

void NameThisThread(absl::string_view name) {
  // The kernel's limit is 16 bytes with the terminating NUL.
  const std::string cut(name.substr(0, 15));
  pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace dedup::storage
