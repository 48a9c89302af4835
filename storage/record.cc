#include "storage/record.h"

#include <tuple>

namespace dedup::storage {

const char* StateName(State state) {
  switch (state) {
    case State::kAbsent:
      return "ABSENT";
    case State::kInProgress:
      return "IN_PROGRESS";
    case State::kCompleted:
      return "COMPLETED";
    case State::kReleased:
      return "RELEASED";
    case State::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

bool Record::operator==(const Record& o) const {
  auto fields = [](const Record& r) {
    return std::tie(r.ns, r.key, r.state, r.owner, r.token, r.fingerprint, r.lease_expires_ms,
                    r.retention_expires_ms, r.attempts, r.created_ms, r.updated_ms, r.completed_ms,
                    r.result, r.holder);
  };
  return fields(*this) == fields(o);
}

State EffectiveState(const Record& record, int64_t now_ms) {
  switch (record.state) {
    case State::kInProgress:
      return record.lease_expires_ms > now_ms ? State::kInProgress : State::kAbsent;
    case State::kCompleted:
    case State::kFailed:
      return record.retention_expires_ms > now_ms ? record.state : State::kAbsent;
    case State::kReleased:
    case State::kAbsent:
      return record.state;
  }
  return State::kAbsent;
}

}  // namespace dedup::storage
