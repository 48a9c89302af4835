#ifndef DEDUP_TESTS_COMMON_FAULT_INJECTION_FILE_SYSTEM_H_
#define DEDUP_TESTS_COMMON_FAULT_INJECTION_FILE_SYSTEM_H_

// A RocksDB file system for fault tests, after LevelDB's fault-injection Env
// and RocksDB's FaultInjectionTestFS. It passes everything through to the
// real file system and, on command:
//   - loses power: from PowerLoss() on every write fails, and Restart()
//     then truncates each file written since the last restart to the length
//     it had at its last successful sync, and deletes files created since
//     their directory was last synced, as a machine that lost power would;
//   - fills the disk: appends beyond a byte budget answer NoSpace;
//   - fails the disk: every append and sync answers an I/O error, or only
//     syncs do;
//   - fails or corrupts the next read of a file whose name contains a
//     given part.
// Thread-safe: RocksDB calls it from many threads.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace dedup::test {

class FaultInjectionFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
  using SteadyTime = std::chrono::steady_clock::time_point;

  FaultInjectionFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

  // The file system and an Env over it, for storage::SetRocksDbEnvForTesting.
  static std::pair<std::shared_ptr<FaultInjectionFileSystem>, std::shared_ptr<rocksdb::Env>>
  Make() {
    auto fs = std::make_shared<FaultInjectionFileSystem>();
    std::shared_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
    return {fs, env};
  }

  const char* Name() const override { return "FaultInjectionFileSystem"; }

  // The machine stops: every later write, sync, create, rename or delete
  // fails and changes nothing. Close the database, then call Restart().
  void PowerLoss() {
    absl::MutexLock lock(&mu_);
    powered_off_ = true;
  }

  // Drops what the disk would not have kept, then powers on. Call only
  // while no database is open on this file system.
  void Restart() {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, state] : files_) {
      std::error_code ec;
      if (unsynced_new_.count(name) != 0) {
        std::filesystem::remove(name, ec);
      } else if (std::filesystem::exists(name, ec) &&
                 std::filesystem::file_size(name, ec) > state->synced) {
        std::filesystem::resize_file(name, state->synced, ec);
      }
    }
    files_.clear();
    unsynced_new_.clear();
    powered_off_ = false;
  }

  // Appends beyond `bytes` more answer NoSpace, as a full disk does.
  void SetSpaceLeft(uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    space_left_ = bytes;
  }

  // Every append and sync answers an I/O error, as a dying disk does.
  void FailWrites() {
    absl::MutexLock lock(&mu_);
    fail_writes_ = true;
  }

  // Appends wait from now until ReleaseAppends(), as on a stalled disk.
  void HoldAppends() {
    absl::MutexLock lock(&mu_);
    hold_appends_ = true;
  }
  void ReleaseAppends() {
    absl::MutexLock lock(&mu_);
    hold_appends_ = false;
  }
  // Waits up to `timeout` until an append is held; whether one is.
  bool AwaitHeldAppend(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&IsPositive, &held_appends_), timeout);
  }

  // Every sync answers an I/O error; appends still work.
  void FailSyncs() {
    absl::MutexLock lock(&mu_);
    fail_syncs_ = true;
  }

  // The next read of a file whose name contains `name_part` fails with an
  // I/O error, or returns its bytes with one of them flipped.
  void FailNextRead(const std::string& name_part) { ArmRead(name_part, false); }
  void CorruptNextRead(const std::string& name_part) { ArmRead(name_part, true); }
  bool ReadFaultPending() const {
    absl::MutexLock lock(&mu_);
    return read_fault_.has_value();
  }

  // When the last successful sync of a WAL file (*.log) started.
  std::optional<SteadyTime> LastWalSyncStart() const {
    absl::MutexLock lock(&mu_);
    return last_wal_sync_start_;
  }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* debug) override {
    if (PoweredOff()) return Lost();
    rocksdb::IOStatus status = target()->NewWritableFile(name, options, file, debug);
    if (!status.ok()) return status;
    const std::string path = Normal(name);
    auto state = std::make_shared<FileState>();
    {
      absl::MutexLock lock(&mu_);
      files_[path] = state;
      unsynced_new_.insert(path);
    }
    *file = std::make_unique<WritableFile>(std::move(*file), this, path, std::move(state));
    return status;
  }

  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* file,
                                       rocksdb::IODebugContext* debug) override {
    if (PoweredOff()) return Lost();
    return target()->ReopenWritableFile(name, options, file, debug);
  }

  rocksdb::IOStatus NewRandomAccessFile(const std::string& name,
                                        const rocksdb::FileOptions& options,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* file,
                                        rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus status = target()->NewRandomAccessFile(name, options, file, debug);
    if (status.ok()) *file = std::make_unique<RandomAccessFile>(std::move(*file), this, name);
    return status;
  }

  rocksdb::IOStatus NewSequentialFile(const std::string& name, const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* file,
                                      rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus status = target()->NewSequentialFile(name, options, file, debug);
    if (status.ok()) *file = std::make_unique<SequentialFile>(std::move(*file), this, name);
    return status;
  }

  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* dir,
                                 rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus status = target()->NewDirectory(name, options, dir, debug);
    if (status.ok()) *dir = std::make_unique<Directory>(std::move(*dir), this, Normal(name));
    return status;
  }

  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* debug) override {
    if (PoweredOff()) return Lost();
    rocksdb::IOStatus status = target()->RenameFile(from, to, options, debug);
    if (!status.ok()) return status;
    const std::string source = Normal(from);
    const std::string dest = Normal(to);
    absl::MutexLock lock(&mu_);
    files_.erase(dest);
    unsynced_new_.erase(dest);
    if (auto it = files_.find(source); it != files_.end()) {
      files_[dest] = it->second;
      files_.erase(it);
    }
    if (unsynced_new_.erase(source) != 0) unsynced_new_.insert(dest);
    return status;
  }

  rocksdb::IOStatus DeleteFile(const std::string& name, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* debug) override {
    if (PoweredOff()) return Lost();
    rocksdb::IOStatus status = target()->DeleteFile(name, options, debug);
    if (status.ok()) {
      absl::MutexLock lock(&mu_);
      files_.erase(Normal(name));
      unsynced_new_.erase(Normal(name));
    }
    return status;
  }

 private:
  // Bytes appended to a file since it was created here, and how many of
  // them the last successful sync covered. Guarded by the file system's mu_.
  struct FileState {
    uint64_t appended = 0;
    uint64_t synced = 0;
  };
  struct ReadFault {
    std::string name_part;
    bool corrupt = false;
  };
  enum class ReadAction { kNone, kFail, kCorrupt };

  // One spelling per path: no "." or "..", no trailing separator.
  static std::string Normal(const std::string& name) {
    std::filesystem::path path = std::filesystem::path(name).lexically_normal();
    if (!path.has_filename() && path.has_parent_path()) path = path.parent_path();
    return path.string();
  }
  static rocksdb::IOStatus Lost() { return rocksdb::IOStatus::IOError("injected: power lost"); }
  static rocksdb::IOStatus Broken() { return rocksdb::IOStatus::IOError("injected: disk failure"); }

  bool PoweredOff() const {
    absl::MutexLock lock(&mu_);
    return powered_off_;
  }

  void ArmRead(const std::string& name_part, bool corrupt) {
    absl::MutexLock lock(&mu_);
    read_fault_ = ReadFault{name_part, corrupt};
  }

  ReadAction TakeReadFault(const std::string& name) {
    absl::MutexLock lock(&mu_);
    if (!read_fault_.has_value() || !absl::StrContains(name, read_fault_->name_part)) {
      return ReadAction::kNone;
    }
    const bool corrupt = read_fault_->corrupt;
    read_fault_.reset();
    return corrupt ? ReadAction::kCorrupt : ReadAction::kFail;
  }

  // Applies a taken read fault to a finished read into `scratch`.
  static rocksdb::IOStatus ApplyReadFault(ReadAction action, rocksdb::IOStatus status,
                                          rocksdb::Slice* result, char* scratch) {
    if (action == ReadAction::kFail) return rocksdb::IOStatus::IOError("injected: read failure");
    if (action == ReadAction::kCorrupt && status.ok() && !result->empty()) {
      if (result->data() != scratch) std::memmove(scratch, result->data(), result->size());
      scratch[result->size() / 2] ^= 0x5a;
      *result = rocksdb::Slice(scratch, result->size());
    }
    return status;
  }

  static bool IsPositive(int* n) { return *n > 0; }
  static bool IsFalse(bool* b) { return !*b; }

  rocksdb::IOStatus BeforeAppend(uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    if (hold_appends_) {
      ++held_appends_;
      mu_.Await(absl::Condition(&IsFalse, &hold_appends_));
      --held_appends_;
    }
    if (powered_off_) return Lost();
    if (fail_writes_) return Broken();
    if (space_left_ != kUnlimited) {
      if (bytes > space_left_) return rocksdb::IOStatus::NoSpace("injected: no space left");
      space_left_ -= bytes;
    }
    return rocksdb::IOStatus::OK();
  }

  void AfterAppend(FileState* state, uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    state->appended += bytes;
  }

  // Checks a sync may start; returns how many bytes it will cover.
  rocksdb::IOStatus BeforeSync(const FileState* state, uint64_t* covered) {
    absl::MutexLock lock(&mu_);
    if (powered_off_) return Lost();
    if (fail_writes_ || fail_syncs_) return Broken();
    *covered = state->appended;
    return rocksdb::IOStatus::OK();
  }

  // A sync that ends after the power went counts for nothing: the caller
  // is told it failed, so it cannot have acknowledged what it covered.
  rocksdb::IOStatus AfterSync(const std::string& name, FileState* state, uint64_t covered,
                              SteadyTime started) {
    absl::MutexLock lock(&mu_);
    if (powered_off_) return Lost();
    state->synced = std::max(state->synced, covered);
    if (absl::EndsWith(name, ".log")) last_wal_sync_start_ = started;
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus SyncDirectory(const std::string& dir) {
    absl::MutexLock lock(&mu_);
    if (powered_off_) return Lost();
    for (auto it = unsynced_new_.begin(); it != unsynced_new_.end();) {
      if (std::filesystem::path(*it).parent_path() == std::filesystem::path(dir)) {
        it = unsynced_new_.erase(it);
      } else {
        ++it;
      }
    }
    return rocksdb::IOStatus::OK();
  }

  class WritableFile final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    WritableFile(std::unique_ptr<rocksdb::FSWritableFile> file, FaultInjectionFileSystem* fs,
                 std::string name, std::shared_ptr<FileState> state)
        : FSWritableFileOwnerWrapper(std::move(file)),
          fs_(fs),
          name_(std::move(name)),
          state_(std::move(state)) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      rocksdb::IOStatus status = fs_->BeforeAppend(data.size());
      if (status.ok()) status = FSWritableFileOwnerWrapper::Append(data, options, debug);
      if (status.ok()) fs_->AfterAppend(state_.get(), data.size());
      return status;
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& /*info*/,
                             rocksdb::IODebugContext* debug) override {
      return Append(data, options, debug);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      return Synced([&] { return FSWritableFileOwnerWrapper::Sync(options, debug); });
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      return Synced([&] { return FSWritableFileOwnerWrapper::Fsync(options, debug); });
    }
    rocksdb::IOStatus RangeSync(uint64_t /*offset*/, uint64_t /*nbytes*/,
                                const rocksdb::IOOptions& /*options*/,
                                rocksdb::IODebugContext* /*debug*/) override {
      // Starts writeback only; durability comes from Sync.
      return rocksdb::IOStatus::OK();
    }

   private:
    template <typename SyncFn>
    rocksdb::IOStatus Synced(SyncFn sync) {
      uint64_t covered = 0;
      const SteadyTime started = std::chrono::steady_clock::now();
      rocksdb::IOStatus status = fs_->BeforeSync(state_.get(), &covered);
      if (status.ok()) status = sync();
      if (status.ok()) status = fs_->AfterSync(name_, state_.get(), covered, started);
      return status;
    }

    FaultInjectionFileSystem* const fs_;
    const std::string name_;
    const std::shared_ptr<FileState> state_;
  };

  class RandomAccessFile final : public rocksdb::FSRandomAccessFileOwnerWrapper {
   public:
    RandomAccessFile(std::unique_ptr<rocksdb::FSRandomAccessFile> file,
                     FaultInjectionFileSystem* fs, std::string name)
        : FSRandomAccessFileOwnerWrapper(std::move(file)), fs_(fs), name_(std::move(name)) {}

    rocksdb::IOStatus Read(uint64_t offset, size_t n, const rocksdb::IOOptions& options,
                           rocksdb::Slice* result, char* scratch,
                           rocksdb::IODebugContext* debug) const override {
      const ReadAction action = fs_->TakeReadFault(name_);
      rocksdb::IOStatus status =
          FSRandomAccessFileOwnerWrapper::Read(offset, n, options, result, scratch, debug);
      return ApplyReadFault(action, std::move(status), result, scratch);
    }
    rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs,
                                const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* debug) override {
      // One request at a time, so that a fault hits exactly one of them.
      for (size_t i = 0; i < num_reqs; ++i) {
        reqs[i].status =
            Read(reqs[i].offset, reqs[i].len, options, &reqs[i].result, reqs[i].scratch, debug);
      }
      return rocksdb::IOStatus::OK();
    }

   private:
    FaultInjectionFileSystem* const fs_;
    const std::string name_;
  };

  class SequentialFile final : public rocksdb::FSSequentialFileOwnerWrapper {
   public:
    SequentialFile(std::unique_ptr<rocksdb::FSSequentialFile> file, FaultInjectionFileSystem* fs,
                   std::string name)
        : FSSequentialFileOwnerWrapper(std::move(file)), fs_(fs), name_(std::move(name)) {}

    rocksdb::IOStatus Read(size_t n, const rocksdb::IOOptions& options, rocksdb::Slice* result,
                           char* scratch, rocksdb::IODebugContext* debug) override {
      const ReadAction action = fs_->TakeReadFault(name_);
      rocksdb::IOStatus status =
          FSSequentialFileOwnerWrapper::Read(n, options, result, scratch, debug);
      return ApplyReadFault(action, std::move(status), result, scratch);
    }

   private:
    FaultInjectionFileSystem* const fs_;
    const std::string name_;
  };

  class Directory final : public rocksdb::FSDirectoryWrapper {
   public:
    Directory(std::unique_ptr<rocksdb::FSDirectory> dir, FaultInjectionFileSystem* fs,
              std::string name)
        : FSDirectoryWrapper(std::move(dir)), fs_(fs), name_(std::move(name)) {}

    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      rocksdb::IOStatus status = FSDirectoryWrapper::Fsync(options, debug);
      return status.ok() ? fs_->SyncDirectory(name_) : status;
    }
    rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions& options,
                                          rocksdb::IODebugContext* debug,
                                          const rocksdb::DirFsyncOptions& dir_options) override {
      rocksdb::IOStatus status =
          FSDirectoryWrapper::FsyncWithDirOptions(options, debug, dir_options);
      return status.ok() ? fs_->SyncDirectory(name_) : status;
    }

   private:
    FaultInjectionFileSystem* const fs_;
    const std::string name_;
  };

  mutable absl::Mutex mu_;
  bool powered_off_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_writes_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_syncs_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_appends_ ABSL_GUARDED_BY(mu_) = false;
  int held_appends_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t space_left_ ABSL_GUARDED_BY(mu_) = kUnlimited;
  std::optional<ReadFault> read_fault_ ABSL_GUARDED_BY(mu_);
  std::optional<SteadyTime> last_wal_sync_start_ ABSL_GUARDED_BY(mu_);
  // Files created since the last Restart, by normalized path.
  std::map<std::string, std::shared_ptr<FileState>> files_ ABSL_GUARDED_BY(mu_);
  // Of those, the ones whose directory has not been synced since.
  std::set<std::string> unsynced_new_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::test

#endif  // DEDUP_TESTS_COMMON_FAULT_INJECTION_FILE_SYSTEM_H_
