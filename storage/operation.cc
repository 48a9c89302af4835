#include "storage/operation.h"

#include <type_traits>

namespace dedup::storage {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kAcquired:
      return "ACQUIRED";
    case Outcome::kInProgress:
      return "IN_PROGRESS";
    case Outcome::kCompleted:
      return "COMPLETED";
    case Outcome::kFailed:
      return "FAILED";
    case Outcome::kMismatch:
      return "MISMATCH";
    case Outcome::kOk:
      return "OK";
    case Outcome::kAlreadyCompleted:
      return "ALREADY_COMPLETED";
    case Outcome::kStaleToken:
      return "STALE_TOKEN";
    case Outcome::kNotFound:
      return "NOT_FOUND";
    case Outcome::kFound:
      return "FOUND";
    case Outcome::kAbsent:
      return "ABSENT";
  }
  return "UNKNOWN";
}

void SetIdentity(Operation* op, const std::string& identity) {
  std::visit(
      [&identity](auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, QueryOp>) o.identity = identity;
      },
      *op);
}

const std::string& OpNamespace(const Operation& op) {
  return std::visit([](const auto& o) -> const std::string& { return o.ns; }, op);
}

const std::string& OpKey(const Operation& op) {
  return std::visit([](const auto& o) -> const std::string& { return o.key; }, op);
}

}  // namespace dedup::storage
