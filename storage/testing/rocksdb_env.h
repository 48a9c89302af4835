#ifndef DEDUP_STORAGE_TESTING_ROCKSDB_ENV_H_
#define DEDUP_STORAGE_TESTING_ROCKSDB_ENV_H_

#include <memory>
#include <utility>

#include "rocksdb/env.h"
#include "storage/store.h"

namespace dedup::storage {

// Test-only: the RocksDB environment a Store runs on, for tests whose file
// system fails on command. StoreOptions carries it as an opaque pointer so
// that nothing outside storage/ sees a RocksDB type; only tests include
// this header.
struct StoreEnvForTesting {
  std::shared_ptr<rocksdb::Env> env;
  // Fault rollback, a deliberately broken store: in fsync mode, writes are
  // acknowledged without syncing the WAL. Set only to show that a
  // durability test catches the bug.
  bool unsynced_fsync = false;
};

inline void SetRocksDbEnvForTesting(StoreOptions* options, std::shared_ptr<rocksdb::Env> env,
                                    bool unsynced_fsync = false) {
  options->env_for_testing = std::make_shared<const StoreEnvForTesting>(
      StoreEnvForTesting{std::move(env), unsynced_fsync});
}

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_TESTING_ROCKSDB_ENV_H_
