#ifndef DEDUP_STORAGE_WAL_FENCE_H_
#define DEDUP_STORAGE_WAL_FENCE_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rocksdb/file_system.h"

namespace dedup::storage {

// Keeps DB::SyncWAL off a WAL whose write has failed.
//
// RocksDB 7.8's SyncWAL syncs beside writes in flight. When a write's
// append to the WAL fails, the log's writer is left in an error state, and
// until that write has recorded its background error, a SyncWAL reaching
// the writer trips an assertion (`sync_without_flush_called_`). Debian's
// RocksDB keeps its assertions, so the process aborts where a clean error
// was due. Checking the background error before SyncWAL leaves that window
// open. Syncing through RocksDB's write queue instead (a write with `sync`
// set) closes it, but stops every write while the disk syncs: the group
// sync would lose its overlap of writing and syncing.
//
// The fence closes the window from below, in the file system: WAL files
// report a failed write to the fence before RocksDB sees it, and wait until
// no sync is in progress. A sync begun after that finds the failure and
// does not call SyncWAL. So no SyncWAL runs while a writer is in its error
// state, and writes that succeed never wait.
//
// A failure is kept per WAL file, for as long as RocksDB's writer of that
// file may still be in its error state: until RocksDB writes to the file
// again (it only does so once recovery has cleared the writer's error), or
// until RocksDB closes the file and lets it go. Recovery (DB::Resume) does not clear
// the fence by itself: a write that failed while the disk was full may
// reach RocksDB only after Resume has returned, and its writer is then in
// the error state again.
//
// A write with `sync` set must not run beside a SyncWAL either: it marks the
// WAL as syncing, so the SyncWAL waits for it, and if its append failed it
// would wait for the SyncWAL in turn, until kFailedWriteWait had passed and
// the assertion could trip as before. DataDir keeps the two apart
// (DataDir::WriteSynced and DataDir::SyncWal).
//
// A failed write waits while RocksDB's write group waits on it; the SyncWAL
// it waits for must not need that group. RocksDB 7.8 holds no lock of its
// own across a WAL append while `manual_wal_flush` and `two_write_queues`
// are off, as the data directory keeps them.
class WalFence {
 public:
  // How long a failed WAL write waits for syncs in progress.
  static constexpr absl::Duration kFailedWriteWait = absl::Seconds(2);

  // OK when the caller may call SyncWAL now, and must call EndSync after.
  // Otherwise the failed WAL write's error: RESOURCE_EXHAUSTED for a full
  // disk, UNAVAILABLE for anything else.
  absl::Status BeginSync();
  void EndSync();

  // A WAL file's write failed with `error`. `first` is true when the file
  // had no failure outstanding, and then the file must call FileCleared
  // once its failure is over. Returns once no sync is in progress (or
  // kFailedWriteWait has passed).
  void WriteFailed(const rocksdb::IOStatus& error, bool first);
  // A WAL file's failure is over: RocksDB wrote to it again, or let it go.
  void FileCleared();

  // `base` with every WAL file (a name ending in ".log") reporting its
  // failed writes to `fence`, which must outlive it.
  static std::shared_ptr<rocksdb::FileSystem> Wrap(std::shared_ptr<rocksdb::FileSystem> base,
                                                   WalFence* fence);

 private:
  absl::Mutex mu_;
  int syncing_ ABSL_GUARDED_BY(mu_) = 0;
  // WAL files with a failure outstanding, and the first failure's error
  // since there were none.
  int failed_files_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_WAL_FENCE_H_
