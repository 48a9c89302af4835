#ifndef DEDUP_TESTS_STORAGE_PRINTERS_H_
#define DEDUP_TESTS_STORAGE_PRINTERS_H_

#include <ostream>

#include "storage/operation.h"
#include "storage/record.h"
#include "storage/store.h"

// GoogleTest printers, so that a failed expectation names states and
// outcomes ("expected COMPLETED, got IN_PROGRESS") instead of numbers.
// Found by argument-dependent lookup, hence in the storage namespace.
namespace dedup::storage {

inline void PrintTo(State state, std::ostream* os) { *os << StateName(state); }

inline void PrintTo(Outcome outcome, std::ostream* os) { *os << OutcomeName(outcome); }

inline void PrintTo(Durability durability, std::ostream* os) {
  *os << (durability == Durability::kFsync ? "fsync" : "buffered");
}

inline void PrintTo(const Record& r, std::ostream* os) {
  *os << "{ns=" << r.ns << " state=" << StateName(r.state) << " owner=" << r.owner
      << " token=" << r.token << " lease_expires_ms=" << r.lease_expires_ms
      << " retention_expires_ms=" << r.retention_expires_ms << " attempts=" << r.attempts
      << " created_ms=" << r.created_ms << " updated_ms=" << r.updated_ms
      << " completed_ms=" << r.completed_ms << " fingerprint.size=" << r.fingerprint.size()
      << " result.size=" << r.result.size() << "}";
}

}  // namespace dedup::storage

#endif  // DEDUP_TESTS_STORAGE_PRINTERS_H_
