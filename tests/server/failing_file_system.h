#ifndef DEDUP_TESTS_SERVER_FAILING_FILE_SYSTEM_H_
#define DEDUP_TESTS_SERVER_FAILING_FILE_SYSTEM_H_

// A RocksDB file system that works until told to fail: then every append
// and sync of a file opened for writing returns an I/O error, as a full or
// dying disk would.

#include <atomic>
#include <memory>
#include <string>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace dedup::server::test {

class FailingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  FailingFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

  const char* Name() const override { return "FailingFileSystem"; }
  void FailWrites() { failing_ = true; }
  // Only syncs fail from now on; appends still succeed, as when a disk
  // accepts writes into its cache but cannot make them durable.
  void FailSyncs() { failing_syncs_ = true; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus status = target()->NewWritableFile(name, options, file, debug);
    if (status.ok()) *file = std::make_unique<File>(std::move(*file), &failing_, &failing_syncs_);
    return status;
  }

  // An Env over this file system, for StoreOptions::env.
  static std::pair<std::shared_ptr<FailingFileSystem>, std::shared_ptr<rocksdb::Env>> Make() {
    auto fs = std::make_shared<FailingFileSystem>();
    std::shared_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
    return {fs, env};
  }

 private:
  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, const std::atomic<bool>* failing,
         const std::atomic<bool>* failing_syncs)
        : FSWritableFileOwnerWrapper(std::move(file)),
          failing_(failing),
          failing_syncs_(failing_syncs) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      if (*failing_) return Injected();
      return FSWritableFileOwnerWrapper::Append(data, options, debug);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      if (*failing_) return Injected();
      return FSWritableFileOwnerWrapper::Append(data, options, info, debug);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      if (*failing_ || *failing_syncs_) return Injected();
      return FSWritableFileOwnerWrapper::Sync(options, debug);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      if (*failing_ || *failing_syncs_) return Injected();
      return FSWritableFileOwnerWrapper::Fsync(options, debug);
    }

   private:
    static rocksdb::IOStatus Injected() {
      return rocksdb::IOStatus::IOError("injected disk failure");
    }
    const std::atomic<bool>* const failing_;
    const std::atomic<bool>* const failing_syncs_;
  };

  std::atomic<bool> failing_{false};
  std::atomic<bool> failing_syncs_{false};
};

}  // namespace dedup::server::test

#endif  // DEDUP_TESTS_SERVER_FAILING_FILE_SYSTEM_H_
