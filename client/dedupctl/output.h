#ifndef DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_
#define DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_

#include <string>

#include "google/protobuf/message.h"

namespace dedup::ctl {

// Exit codes scripts branch on (also listed by `dedupctl --help`).
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
};

// One response as a line of `field=value` pairs (bytes escaped, times as
// RFC 3339), or as JSON when `json` is set (bytes fields in base64, as
// protobuf's JSON mapping has them).
std::string Render(const google::protobuf::Message& message, bool json);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_
