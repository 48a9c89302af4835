#ifndef DEDUP_SERVER_RESPONSE_BUILDER_H_
#define DEDUP_SERVER_RESPONSE_BUILDER_H_

#include "absl/status/statusor.h"
#include "dedup/v1/dedup.pb.h"
#include "storage/operation.h"

namespace dedup::server {

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
