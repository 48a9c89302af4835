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
  // Fault rollback: storage time is the raw wall clock, with no step rule
  // and no persisted high-water mark (storage_time.h). Set only to show
  // that the clock-step tests catch the bug.
  bool unprotected_clock = false;
};

inline void SetRocksDbEnvForTesting(StoreOptions* options, std::shared_ptr<rocksdb::Env> env,
                                    bool unsynced_fsync = false) {
  StoreEnvForTesting testing;
  if (options->env_for_testing != nullptr) testing = *options->env_for_testing;
  testing.env = std::move(env);
  testing.unsynced_fsync = unsynced_fsync;
  options->env_for_testing = std::make_shared<const StoreEnvForTesting>(std::move(testing));
}

// Fault rollback: the store reads the raw wall clock (see above).
inline void SetUnprotectedClockForTesting(StoreOptions* options) {
  StoreEnvForTesting testing;
  if (options->env_for_testing != nullptr) testing = *options->env_for_testing;
  testing.unprotected_clock = true;
  options->env_for_testing = std::make_shared<const StoreEnvForTesting>(std::move(testing));
}

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_TESTING_ROCKSDB_ENV_H_
