#ifndef DEDUP_STORAGE_LIFECYCLE_H_
#define DEDUP_STORAGE_LIFECYCLE_H_

#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "storage/operation.h"
#include "storage/record.h"

namespace dedup::storage {

// What an operation does to one record: the answer, and the record to store
// if it changed. A pure function of its inputs, so every transition of
// design.md §3 can be tested without a database.
struct Transition {
  OpResult result;
  bool write = false;  // `stored` must be persisted before `result` is sent.
  Record stored;
};

// Supplies a fresh fencing token, larger than every token handed out before
// for the key. Called at most once per transition, only when a claim wins.
using TokenSource = absl::FunctionRef<absl::StatusOr<uint64_t>()>;

// Decides `op` against `current` (nullopt: nothing stored) at `now_ms`.
// Fails only when `next_token` fails. An authenticated Complete, Release or
// Extend that presents the newest token of a claim another identity holds
// changes nothing and is answered STALE_TOKEN exactly as a token that is not
// the newest would be, with OpResult::foreign_token set (design.md §10).
//
// Rules beyond the state diagram:
//  - fingerprints mismatch only when both sides are non-empty and differ;
//    a record without one adopts the first fingerprint given;
//  - a claim by the owner of a live lease is re-entrant: same token, the
//    lease is not changed; with authentication, only for the identity that
//    took it;
//  - Complete, Release and Extend succeed with the newest token of an
//    IN_PROGRESS record even after its lease expired, as no one can have
//    claimed since (a claim would have issued a newer token);
//  - Release is idempotent: repeating it with the same token answers as the
//    first time did (OK, or FAILED if it poisoned the key), so a client may
//    retry it after a lost response;
//  - a claim over an expired lease counts as a new attempt; when the key has
//    already been acquired max_attempts times it is poisoned (FAILED)
//    instead, like a release at the limit: workers keep dying on it.
absl::StatusOr<Transition> Decide(const Operation& op, const std::optional<Record>& current,
                                  int64_t now_ms, TokenSource next_token);

}  // namespace dedup::storage

#endif  // DEDUP_STORAGE_LIFECYCLE_H_
