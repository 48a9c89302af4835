#ifndef DEDUP_SERVER_RESPONSE_BUILDER_H_
#define DEDUP_SERVER_RESPONSE_BUILDER_H_

#include "absl/status/statusor.h"
#include "dedup/v1/dedup.pb.h"
#include "storage/operation.h"
#include "storage/record.h"

namespace dedup::server {

// Whether a record in `visible_state` (its state as readers see it now)
// shows its token. A token is a capability: while a record is IN_PROGRESS,
// and while a lapsed lease reads as ABSENT but its newest token may still
// Complete or Release it, the token would let any reader act for the
// holder, so it is withheld (0). Once COMPLETED, RELEASED or FAILED the
// token grants nothing new (a repeat answers as before) and is shown, since
// a downstream may want to match it (design.md §10).
bool TokenIsShown(storage::State visible_state);

// Turns storage answers into dedup.v1 responses. Each Fill* expects the
// result of the matching operation kind.
void FillRecord(const storage::Record& record, v1::Record* out);
void FillClaim(const storage::OpResult& result, v1::ClaimResponse* out);
void FillComplete(const storage::OpResult& result, v1::CompleteResponse* out);
void FillRelease(const storage::OpResult& result, v1::ReleaseResponse* out);
void FillExtend(const storage::OpResult& result, v1::ExtendResponse* out);
void FillQuery(const storage::OpResult& result, v1::QueryResponse* out);

// One Batch item: the response of the operation's kind, or its error.
void FillOperationResult(const v1::Operation& operation,
                         const absl::StatusOr<storage::OpResult>& result, v1::OperationResult* out);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_RESPONSE_BUILDER_H_
