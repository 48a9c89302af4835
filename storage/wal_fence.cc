#include "storage/wal_fence.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dedup::storage {

absl::Status WalFence::BeginSync() {
  absl::MutexLock lock(&mu_);
  if (failed_files_ > 0) return failed_;
  ++syncing_;
  return absl::OkStatus();
}

void WalFence::EndSync() {
  absl::MutexLock lock(&mu_);
  --syncing_;
}

void WalFence::WriteFailed(const rocksdb::IOStatus& error, bool first) {
  absl::MutexLock lock(&mu_);
  if (first && failed_files_++ == 0) {
    const std::string message = absl::StrCat("a write to the WAL failed: ", error.ToString());
    failed_ =
        error.IsNoSpace() ? absl::ResourceExhaustedError(message) : absl::UnavailableError(message);
  }
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](int* syncing) { return *syncing == 0; }, &syncing_),
                       kFailedWriteWait);
}

void WalFence::FileCleared() {
  absl::MutexLock lock(&mu_);
  if (--failed_files_ == 0) failed_ = absl::OkStatus();
}

namespace {

using rocksdb::DataVerificationInfo;
using rocksdb::FileOptions;
using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

// A WAL file whose writes report their failures to the fence before they
// return. Syncs pass through: a failed sync leaves RocksDB's writer in a
// state it expects.
//
// RocksDB's writer of a file calls nothing on it while in its error state,
// so a write that reaches the file after a failure means recovery has
// cleared that state. A sync does not: it may have begun beside the failed
// write, before the failure.
class FencedWalFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FencedWalFile(std::unique_ptr<FSWritableFile> file, WalFence* fence)
      : FSWritableFileOwnerWrapper(std::move(file)), fence_(fence) {}
  ~FencedWalFile() override { Clear(); }

  IOStatus Append(const Slice& data, const IOOptions& options, IODebugContext* dbg) override {
    return Report(target()->Append(data, options, dbg));
  }
  IOStatus Append(const Slice& data, const IOOptions& options, const DataVerificationInfo& info,
                  IODebugContext* dbg) override {
    return Report(target()->Append(data, options, info, dbg));
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            IODebugContext* dbg) override {
    return Report(target()->PositionedAppend(data, offset, options, dbg));
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            const DataVerificationInfo& info, IODebugContext* dbg) override {
    return Report(target()->PositionedAppend(data, offset, options, info, dbg));
  }
  IOStatus Flush(const IOOptions& options, IODebugContext* dbg) override {
    return Report(target()->Flush(options, dbg));
  }
  IOStatus Truncate(uint64_t size, const IOOptions& options, IODebugContext* dbg) override {
    return Report(target()->Truncate(size, options, dbg));
  }

 private:
  // Writes to one file come one at a time (RocksDB's write group), and its
  // writer destroys the file when it closes it, after the last write.
  IOStatus Report(IOStatus status) {
    if (status.ok()) {
      Clear();
    } else {
      fence_->WriteFailed(status, /*first=*/!failed_);
      failed_ = true;
    }
    return status;
  }
  void Clear() {
    if (!failed_) return;
    failed_ = false;
    fence_->FileCleared();
  }

  WalFence* const fence_;
  bool failed_ = false;
};

class FencedFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FencedFileSystem(std::shared_ptr<rocksdb::FileSystem> base, WalFence* fence)
      : FileSystemWrapper(std::move(base)), fence_(fence) {}

  static const char* kClassName() { return "DedupWalFencedFileSystem"; }
  const char* Name() const override { return kClassName(); }

  IOStatus NewWritableFile(const std::string& name, const FileOptions& options,
                           std::unique_ptr<FSWritableFile>* file, IODebugContext* dbg) override {
    return Fence(name, target()->NewWritableFile(name, options, file, dbg), file);
  }
  IOStatus ReopenWritableFile(const std::string& name, const FileOptions& options,
                              std::unique_ptr<FSWritableFile>* file, IODebugContext* dbg) override {
    return Fence(name, target()->ReopenWritableFile(name, options, file, dbg), file);
  }
  IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                             const FileOptions& options, std::unique_ptr<FSWritableFile>* file,
                             IODebugContext* dbg) override {
    return Fence(name, target()->ReuseWritableFile(name, old_name, options, file, dbg), file);
  }

 private:
  IOStatus Fence(const std::string& name, IOStatus opened, std::unique_ptr<FSWritableFile>* file) {
    if (opened.ok() && absl::EndsWith(name, ".log")) {
      *file = std::make_unique<FencedWalFile>(std::move(*file), fence_);
    }
    return opened;
  }

  WalFence* const fence_;
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> WalFence::Wrap(std::shared_ptr<rocksdb::FileSystem> base,
                                                    WalFence* fence) {
  return std::make_shared<FencedFileSystem>(std::move(base), fence);
}

}  // namespace dedup::storage
