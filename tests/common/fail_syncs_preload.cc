// A disk whose syncs fail, for black-box tests of real processes: a
// library to preload (LD_PRELOAD) into dedupd. fsync and fdatasync of a
// file whose directory holds a file named "dedup-test-fail-syncs" (or of
// such a directory itself) answer EIO, as a disk that could not write
// what it was asked to does; every other call goes on to the C library.
// Touching the marker file in one node's data directory fails that node's
// syncs from then on, while the node's writes still succeed: what a
// process sees when its disk fails under the page cache.
//
// The marker is looked for at every sync: slow, and meant for tests only.

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include <string>

namespace {

constexpr char kMarker[] = "dedup-test-fail-syncs";

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Whether a sync of `fd` is to fail.
bool Failing(int fd) {
  char link[64];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  char target[PATH_MAX];
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  const std::string path(target, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  return Exists(dir + "/" + kMarker) || Exists(path + "/" + kMarker);
}

using SyncCall = int (*)(int);

SyncCall Next(const char* name) { return reinterpret_cast<SyncCall>(dlsym(RTLD_NEXT, name)); }

int SyncUnlessFailing(SyncCall next, int fd) {
  if (Failing(fd)) {
    errno = EIO;
    return -1;
  }
  return next(fd);
}

}  // namespace

extern "C" int fsync(int fd) {
  static const SyncCall next = Next("fsync");
  return SyncUnlessFailing(next, fd);
}

extern "C" int fdatasync(int fd) {
  static const SyncCall next = Next("fdatasync");
  return SyncUnlessFailing(next, fd);
}
