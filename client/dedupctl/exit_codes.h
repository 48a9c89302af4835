#ifndef DEDUP_CLIENT_DEDUPCTL_EXIT_CODES_H_
#define DEDUP_CLIENT_DEDUPCTL_EXIT_CODES_H_

#include "absl/types/span.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup::ctl {

// Exit codes scripts branch on (also listed by `dedupctl --help` and in
// README.md).
enum ExitCode {
  kExitOk = 0,           // ACQUIRED, OK, ALREADY_COMPLETED, found, SERVING
  kExitError = 1,        // the call failed (unreachable, bad input, ...)
  kExitUsage = 2,        // bad command line
  kExitInProgress = 10,  // Claim: someone else holds the key
  kExitCompleted = 11,   // Claim: already done (result printed)
  kExitFailed = 12,      // Claim/Release: the key is poisoned
  kExitMismatch = 13,    // Claim: fingerprint differs
  kExitStaleToken = 14,  // Complete/Release/Extend: token is not the newest
  kExitNotFound = 15,    // Complete/Release/Extend: no record; Query: ABSENT
  // cluster status: a shard without a leader, or with fewer live replicas
  // than a majority (or, not replicated, whose node did not answer).
  kExitClusterDegraded = 16,
};

// The enum of a response that decides the exit code.
enum class Answer {
  kClaimOutcome,     // v1::ClaimResponse::Outcome
  kCompleteOutcome,  // v1::CompleteResponse::Outcome
  kReleaseOutcome,   // v1::ReleaseResponse::Outcome
  kExtendOutcome,    // v1::ExtendResponse::Outcome
  kRecordState,      // v1::RecordState of a QueryResponse's record
};

// One row of the table: the value of an enum, its name as the response is
// printed with it, and the exit code it gives.
struct OutcomeExit {
  Answer answer;
  int value;
  const char* name;
  ExitCode exit;
};

// Every outcome dedupctl knows, each once.
absl::Span<const OutcomeExit> OutcomeTable();

// The row of `value` of `answer`; null for a value the table lacks:
// *_UNSPECIFIED, or an outcome added to the API after this dedupctl was
// built.
const OutcomeExit* FindOutcome(Answer answer, int value);

// The exit code of a response. A value the table lacks gives kExitError,
// never kExitOk: a script must not take an answer it cannot read for
// success.
ExitCode ExitCodeOf(const v1::ClaimResponse& response);
ExitCode ExitCodeOf(const v1::CompleteResponse& response);
ExitCode ExitCodeOf(const v1::ReleaseResponse& response);
ExitCode ExitCodeOf(const v1::ExtendResponse& response);
ExitCode ExitCodeOf(const v1::QueryResponse& response);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_EXIT_CODES_H_
