#ifndef DEDUP_STORAGE_RECORD_H_
#define DEDUP_STORAGE_RECORD_H_

#include <cstdint>
#include <string>

namespace dedup::storage {

// Stored states of a record (design.md §3). kAbsent is never stored: it is what
// a read reports for a missing record or one whose lease or retention has
// passed.
enum class State : uint8_t {
  kAbsent = 0,
  kInProgress = 1,
  kCompleted = 2,
  kReleased = 3,
  kFailed = 4,
};

const char* StateName(State state);

// One idempotency key's record. Times are Unix epoch milliseconds.
struct Record {
  std::string ns;   // Namespace; not part of the encoded value.
  std::string key;  // Idempotency key; not part of the encoded value.
  State state = State::kAbsent;
  std::string owner;                 // Owner of the newest claim.
  uint64_t token = 0;                // Newest fencing token handed out for the key.
  std::string fingerprint;           // Payload digest given at claim time, if any.
  int64_t lease_expires_ms = 0;      // IN_PROGRESS: end of the lease.
  int64_t retention_expires_ms = 0;  // COMPLETED/FAILED: end of retention.
  uint32_t attempts = 0;             // Acquisitions so far.
  int64_t created_ms = 0;            // First acquisition.
  int64_t updated_ms = 0;            // Last state change.
  int64_t completed_ms = 0;          // COMPLETED: when.
  std::string result;                // COMPLETED: stored result.
  // The authenticated identity that took the newest claim (design.md §10);
  // empty when the server runs without authentication. Only that identity
  // may Complete, Release or Extend the claim, or have its token back from
  // a repeated Claim.
  std::string holder;

  bool operator==(const Record& other) const;
};

// The state a reader sees at `now_ms`: a lapsed lease or retention reads as
// kAbsent (lazy expiry), whether or not compaction has dropped the record.
State EffectiveState(const Record& record, int64_t now_ms);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_RECORD_H_
