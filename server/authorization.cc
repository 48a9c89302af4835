#include "server/authorization.h"

#include <sys/stat.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/grpc_security_constants.h"
#include "openssl/evp.h"
#include "spdlog/spdlog.h"

namespace dedup::server {
namespace {

constexpr char kDigestPrefix[] = "sha256:";
constexpr size_t kDigestHexChars = 64;

bool IsLowerHex(absl::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

// The token of an "authorization: Bearer TOKEN" header; nullopt when the
// call sends no authorization header, empty when it sends another scheme
// or more than one header (which a proxy in front might read otherwise).
std::optional<std::string> BearerToken(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  if (metadata.count("authorization") != 1) return std::string();
  absl::string_view value(it->second.data(), it->second.size());
  value = absl::StripAsciiWhitespace(value);
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) {
    return std::string();
  }
  return std::string(absl::StripLeadingAsciiWhitespace(value.substr(7)));
}

// The parsed tokens file at `path`.
absl::StatusOr<TokenTable> ReadTokensFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("auth.tokens_file: cannot read '", path, "'"));
  }
  return ParseTokens(text.str(), path);
}

TokenGuessBrake::Options BrakeOptions(const AuthSettings& settings) {
  TokenGuessBrake::Options options;
  options.max_unknown = settings.max_unknown_tokens;
  // One /64 holds a subnet's or a node's pods: sixteen addresses' worth.
  options.max_unknown_per_prefix = settings.max_unknown_tokens * 16;
  options.penalty = absl::Milliseconds(settings.unknown_token_penalty_ms);
  return options;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kClaim:
      return "claim";
    case Role::kRead:
      return "read";
    case Role::kScan:
      return "scan";
    case Role::kCluster:
      return "cluster";
    case Role::kReplica:
      return "replica";
  }
  return "unknown";
}

const char* DenyReasonName(DenyReason reason) {
  switch (reason) {
    case DenyReason::kUnauthenticated:
      return "unauthenticated";
    case DenyReason::kNoGrant:
      return "no_grant";
    case DenyReason::kNotHolder:
      return "not_holder";
    case DenyReason::kUnknownToken:
      return "unknown_token";
    case DenyReason::kThrottled:
      return "throttled";
  }
  return "unknown";
}

std::string Sha256Hex(absl::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

absl::StatusOr<TokenTable> ParseTokens(absl::string_view text, absl::string_view path) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens file ", path, " line ", line_number, ": ", what));
    };
    if (fields.size() != 2) return error("expected \"IDENTITY sha256:HEX\"");
    absl::string_view digest = fields[1];
    if (!absl::ConsumePrefix(&digest, kDigestPrefix) || digest.size() != kDigestHexChars ||
        !IsLowerHex(absl::AsciiStrToLower(digest))) {
      return error(
          "the token must be given as sha256: and the 64 hex digits of its SHA-256 (e.g. "
          "printf %s \"$TOKEN\" | sha256sum), never in the clear");
    }
    if (!table.emplace(absl::AsciiStrToLower(digest), std::string(fields[0])).second) {
      return error("the same token is listed twice");
    }
  }
  return table;
}

bool IsDnsName(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  bool first = true;
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    const bool wildcard = first && label == "*";
    first = false;
    if (wildcard) continue;
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
  }
  return true;
}

std::string CertificateIdentity(const grpc::AuthContext& auth) {
  if (!auth.IsPeerAuthenticated()) return "";
  for (const grpc::string_ref& uri : auth.FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
    absl::string_view value(uri.data(), uri.size());
    if (absl::StrContains(value, ':')) return std::string(value);
  }
  for (const grpc::string_ref& dns : auth.FindPropertyValues(GRPC_PEER_DNS_PROPERTY_NAME)) {
    absl::string_view value(dns.data(), dns.size());
    if (IsDnsName(value)) return std::string(value);
  }
  return "";
}

absl::StatusOr<std::string> GrantIdentity(absl::string_view written, absl::string_view field) {
  if (absl::ConsumePrefix(&written, "uri:")) {
    if (!absl::StrContains(written, ':')) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": \"uri:", written, "\" is not a URI with a scheme (e.g. uri:spiffe://prod/x)"));
    }
  } else if (absl::ConsumePrefix(&written, "dns:")) {
    if (!IsDnsName(written)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": \"dns:", written, "\" is not a host name (letters, digits, hyphens and dots)"));
    }
  }
  if (written.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty"));
  return std::string(written);
}

Authorizer::FileStamp Authorizer::StampOf(const std::string& path) {
  FileStamp stamp;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    stamp.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    stamp.size = st.st_size;
    stamp.inode = st.st_ino;
  }
  return stamp;
}

Authorizer::Authorizer(const AuthSettings& settings)
    : settings_(settings), tokens_(std::make_shared<TokenTable>()), brake_(BrakeOptions(settings)) {
  for (const Grant& grant : settings_.grants) grants_[grant.identity].push_back(&grant);
}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(const AuthSettings& settings) {
  std::unique_ptr<Authorizer> authorizer(new Authorizer(settings));
  if (!settings.tokens_file.empty()) {
    absl::StatusOr<TokenTable> table = ReadTokensFile(settings.tokens_file);
    if (!table.ok()) return table.status();
    absl::MutexLock lock(&authorizer->mu_);
    authorizer->tokens_ = std::make_shared<const TokenTable>(*std::move(table));
    authorizer->stamp_ = StampOf(settings.tokens_file);
  }
  return authorizer;
}

void Authorizer::MaybeReloadTokens() {
  if (settings_.tokens_file.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  FileStamp seen;
  {
    absl::MutexLock lock(&mu_);
    if (now < next_check_) return;
    // This caller does the check; the file is read without the lock, so
    // that other calls never wait on the file system.
    next_check_ = now + std::chrono::milliseconds(settings_.refresh_interval_ms);
    seen = stamp_;
  }
  const FileStamp stamp = StampOf(settings_.tokens_file);
  if (stamp == seen) return;
  absl::StatusOr<TokenTable> table = ReadTokensFile(settings_.tokens_file);
  absl::MutexLock lock(&mu_);
  stamp_ = stamp;  // A file that does not parse is reported once per change.
  if (table.ok()) {
    tokens_ = std::make_shared<const TokenTable>(*std::move(table));
    spdlog::info("auth: reloaded {} bearer token(s) from {}", tokens_->size(),
                 settings_.tokens_file);
  } else {
    spdlog::error("auth: keeping the {} bearer token(s) loaded before: {}", tokens_->size(),
                  std::string(table.status().message()));
  }
}

std::shared_ptr<const TokenTable> Authorizer::tokens() const {
  absl::MutexLock lock(&mu_);
  return tokens_;
}

absl::StatusOr<Caller> Authorizer::Authenticate(const grpc::ServerContextBase& context,
                                                DenyReason* why) {
  if (!enabled()) return Caller();
  DenyReason ignored;
  if (why == nullptr) why = &ignored;
  *why = DenyReason::kUnauthenticated;
  if (std::optional<std::string> token = BearerToken(context)) {
    // Counted by source: an IPv4 address, or an IPv6 /64.
    const std::string peer = context.peer();
    {
      absl::MutexLock lock(&brake_mu_);
      if (brake_.Braked(peer, absl::Now())) {
        *why = DenyReason::kThrottled;
        return absl::UnauthenticatedError(absl::StrCat(
            "too many unknown bearer tokens from this address: calls with a bearer token are "
            "refused for ",
            absl::FormatDuration(brake_.options().penalty), " after the last one"));
      }
    }
    if (token->empty()) {
      return absl::UnauthenticatedError(
          "the call must send one authorization header, \"Bearer TOKEN\" with a non-empty "
          "token");
    }
    MaybeReloadTokens();
    // Looked up by digest: the table never holds a token, and timing of
    // the lookup tells nothing about the preimage of a digest.
    std::string digest = Sha256Hex(*token);
    const std::shared_ptr<const TokenTable> table = tokens();
    const auto it = table->find(digest);
    if (it == table->end()) {
      absl::MutexLock lock(&brake_mu_);
      brake_.RecordUnknown(peer, absl::Now());
      *why = DenyReason::kUnknownToken;
      return absl::UnauthenticatedError("bearer token not recognized");
    }
    return Caller{it->second, std::move(digest), it->second};
  }
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  std::string identity = auth != nullptr ? CertificateIdentity(*auth) : "";
  if (identity.empty()) {
    return absl::UnauthenticatedError(
        "no identity: present a client certificate with a URI or DNS subject alternative name, "
        "or a bearer token");
  }
  std::string tenant = identity;
  return Caller{std::move(identity), "", std::move(tenant)};
}

absl::Status Authorizer::Recheck(const Caller& caller) {
  if (!enabled() || caller.token_digest.empty()) return absl::OkStatus();
  MaybeReloadTokens();
  const std::shared_ptr<const TokenTable> table = tokens();
  const auto it = table->find(caller.token_digest);
  if (it == table->end() || it->second != caller.identity) {
    return absl::UnauthenticatedError("bearer token revoked while the call was open");
  }
  return absl::OkStatus();
}

absl::Status Authorizer::Authorize(const Caller& caller, absl::string_view ns, Role role) const {
  if (!enabled()) return absl::OkStatus();
  const auto it = grants_.find(caller.identity);
  if (it != grants_.end()) {
    for (const Grant* grant : it->second) {
      bool holds = false;
      switch (role) {
        case Role::kClaim:
          holds = grant->claim;
          break;
        case Role::kRead:
          holds = grant->read || grant->claim;
          break;
        case Role::kScan:
          holds = grant->scan;
          break;
        case Role::kCluster:
          holds = grant->cluster;
          break;
        case Role::kReplica:
          holds = grant->replica;
          break;
      }
      if (!holds) continue;
      for (const std::string& granted : grant->namespaces) {
        if (granted == "*" || granted == ns) return absl::OkStatus();
      }
    }
  }
  return absl::PermissionDeniedError(absl::StrCat("identity '", caller.identity, "' has no '",
                                                  RoleName(role), "' grant on namespace '", ns,
                                                  "'"));
}

absl::Status Authorizer::AuthorizeAny(const Caller& caller) const {
  if (!enabled() || grants_.contains(caller.identity)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("identity '", caller.identity, "' has no grant on any namespace"));
}

}  // namespace dedup::server
