#ifndef DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_
#define DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_

#include <string>

#include "google/protobuf/message.h"

namespace dedup::ctl {

// One response as a line of `field=value` pairs (bytes escaped, times as
// RFC 3339), or as JSON when `json` is set (bytes fields in base64, as
// protobuf's JSON mapping has them).
std::string Render(const google::protobuf::Message& message, bool json);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_OUTPUT_H_
