#ifndef DEDUP_SERVER_PROTO_MAPPING_H_
#define DEDUP_SERVER_PROTO_MAPPING_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dedup/v1/dedup.pb.h"
#include "storage/operation.h"
#include "storage/record.h"

namespace dedup::server {

// How storage's record states and operation outcomes appear in dedup.v1
// and in metric labels. Each concept is one table here, read by the
// response builder, Scan and the metrics; nothing else spells them out.

// The state a record is reported with.
v1::RecordState StateToProto(storage::State state);

// A Scan's state filter: STATE_UNSPECIFIED means every live state
// (storage::State::kAbsent); the stored states map to themselves; anything
// else is INVALID_ARGUMENT naming the `state` field.
absl::StatusOr<storage::State> StateFilterFromProto(v1::RecordState state);

// Operations whose outcomes are counted by label.
enum class OutcomeKind { kClaim, kComplete, kRelease, kExtend };
inline constexpr size_t kOutcomeKindCount = 4;

// One outcome of one kind of operation: the storage outcome, the value of
// that response's Outcome enum, and the metric label.
struct OutcomeRow {
  storage::Outcome outcome;
  int proto;
  const char* label;
};

// The outcomes `kind` can answer, in the order of the metric series.
absl::Span<const OutcomeRow> OutcomesOf(OutcomeKind kind);

// The row of `outcome` among OutcomesOf(kind). The storage lifecycle only
// answers listed outcomes; should it ever answer another, the last row
// (MISMATCH for a Claim, NOT_FOUND otherwise) stands in, so a caller never
// reads an unlisted outcome as permission to proceed.
size_t OutcomeIndex(OutcomeKind kind, storage::Outcome outcome);
const OutcomeRow& OutcomeRowOf(OutcomeKind kind, storage::Outcome outcome);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_PROTO_MAPPING_H_
