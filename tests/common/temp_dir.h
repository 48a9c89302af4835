#ifndef DEDUP_TESTS_COMMON_TEMP_DIR_H_
#define DEDUP_TESTS_COMMON_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace dedup::test {

// A fresh, uniquely named directory under the system temp directory
// (honouring TMPDIR), removed with everything in it on destruction. Tests
// never share a path, so they can run in parallel and leave nothing behind.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "dedup-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();  // No hermetic place to run in: nothing can be tested.
    }
    path_ = pattern;
  }

  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  // A path inside the directory (not created).
  std::string Sub(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

}  // namespace dedup::test

#endif  // DEDUP_TESTS_COMMON_TEMP_DIR_H_
