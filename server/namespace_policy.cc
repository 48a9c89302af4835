#include "server/namespace_policy.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dedup::server {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

}  // namespace

absl::Status ValidateNamespaceName(absl::string_view name, absl::string_view field) {
  if (name.empty() || name.size() > kMaxNamespaceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be 1..", kMaxNamespaceBytes, " characters, got ", name.size()));
  }
  if (!IsLowerAlnum(name[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must start with [a-z0-9], got '", name, "'"));
  }
  for (char c : name) {
    if (!IsLowerAlnum(c) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " may contain only [a-z0-9._-], got '", absl::CHexEscape(name), "'"));
    }
  }
  return absl::OkStatus();
}

PolicyTable::PolicyTable(Policy default_policy, absl::flat_hash_map<std::string, Policy> declared,
                         bool strict)
    : default_(default_policy), declared_(std::move(declared)), strict_(strict) {}

absl::StatusOr<const Policy*> PolicyTable::Find(absl::string_view ns) const {
  if (auto it = declared_.find(ns); it != declared_.end()) return &it->second;
  if (strict_) {
    return absl::NotFoundError(
        absl::StrCat("namespace '", ns, "' is not declared and this server runs strict"));
  }
  return &default_;
}

}  // namespace dedup::server
