#ifndef DEDUP_SERVER_AUTHORIZATION_H_
#define DEDUP_SERVER_AUTHORIZATION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"
#include "server/token_guess_brake.h"

namespace dedup::server {

// Authentication and per-namespace authorization (design.md §10).
//
// A call presents at most one identity: the identity of its bearer token
// if it sends one ("authorization: Bearer TOKEN"), otherwise its client
// certificate's first URI subject alternative name, or its first DNS name
// when it has no URI. Grants give an identity roles on namespaces. Once any
// grant is configured, everything not granted is denied; with none,
// authentication is off and every caller may do everything (the loopback
// default).

// What a grant allows. In the configuration, "admin" grants both kScan
// and kCluster.
enum class Role {
  kClaim,    // Claim, Complete, Release, Extend, Query, and those in Batch and Stream.
  kRead,     // Query, alone and in Batch and Stream: a claim grant includes it.
  kScan,     // Scan: reconciliation jobs and operators' reports.
  kCluster,  // MoveShard and SetDraining, on "*": where replicas live.
  // The replicas' own protocol (dedup.replication.v1): granted to the
  // nodes' identities, on "*".
  kReplica,
};
const char* RoleName(Role role);

// Why a call or an item was refused: the `reason` label of
// dedup_auth_denied_total.
enum class DenyReason {
  kUnauthenticated,  // No identity: no certificate with one, and no bearer token.
  kNoGrant,          // The identity lacks the role on the namespace.
  kNotHolder,        // The newest token of a claim another identity holds.
  kUnknownToken,     // A bearer token that is not in the tokens file.
  kThrottled,        // A bearer token from an address under the guessing brake.
};
inline constexpr int kDenyReasonCount = 5;
const char* DenyReasonName(DenyReason reason);

// One grant: `identity` may act in `role`s on `namespaces` ("*": all).
struct Grant {
  std::string identity;
  std::vector<std::string> namespaces;
  bool claim = false;
  bool read = false;
  bool scan = false;
  bool cluster = false;
  bool replica = false;
};

struct AuthSettings {
  // Bearer tokens: lines "IDENTITY sha256:HEX", HEX the SHA-256 of the
  // token in 64 hex digits; '#' begins a comment. Empty: none.
  std::string tokens_file;
  int64_t refresh_interval_ms = 10'000;  // How often tokens_file is checked.
  // The brake on guessing tokens (token_guess_brake.h): unknown tokens one
  // peer address (an IPv6 /64) may present per penalty.
  uint32_t max_unknown_tokens = 20;
  int64_t unknown_token_penalty_ms = 10'000;
  std::vector<Grant> grants;

  bool enabled() const { return !grants.empty(); }
};

// The SHA-256 of `bytes` in lowercase hex.
std::string Sha256Hex(absl::string_view bytes);

// Bearer tokens by the hex SHA-256 of the token.
using TokenTable = absl::flat_hash_map<std::string, std::string>;

// Parses the text of a tokens file; errors name `path` and the line.
absl::StatusOr<TokenTable> ParseTokens(absl::string_view text, absl::string_view path);

// The identity in a verified client certificate, or empty: its first URI
// subject alternative name that has a scheme ("spiffe://prod/worker"), or
// else its first DNS name that is a host name (letters, digits, hyphens
// and dots; "*" as a first label). A URI always holds a ':' and a host
// name never does, so a DNS name cannot stand in for a URI identity, nor
// the other way round: a DNS name "spiffe://prod/worker" is no identity.
std::string CertificateIdentity(const grpc::AuthContext& auth);

// Whether `name` is a host name as above.
bool IsDnsName(absl::string_view name);

// The identity a grant's `identity` field names: "uri:X" is the URI X
// (which must have a scheme), "dns:X" the DNS name X (a host name),
// anything else as written (a URI, a DNS name or a bearer token's
// identity). INVALID_ARGUMENT, naming `field`, for a typed name of the
// wrong form.
absl::StatusOr<std::string> GrantIdentity(absl::string_view written, absl::string_view field);

// The authenticated caller of one call; empty identity when
// authentication is off.
struct Caller {
  std::string identity;
  // The SHA-256 of the bearer token the identity came from; empty for a
  // certificate (or without authentication).
  std::string token_digest;
  // Whose share of the server the call uses (tenant_quota.h): the
  // identity; empty without authentication, where no share applies.
  std::string tenant;
};

// Thread-safe. The tokens file is re-read when its modification time,
// size or inode changes, checked at most once per refresh interval on the
// calls' own threads; a file that cannot be read keeps the tokens last
// loaded (and the error is logged).
class Authorizer {
 public:
  // Loads the tokens file now: a server does not start with a tokens file
  // it cannot read.
  static absl::StatusOr<std::unique_ptr<Authorizer>> Create(const AuthSettings& settings);

  bool enabled() const { return settings_.enabled(); }

  // The caller of a call, or UNAUTHENTICATED saying what is missing, with
  // `*why` (when not null) set to the reason: kUnauthenticated,
  // kUnknownToken, or kThrottled for a bearer token from an address that
  // presented auth.max_unknown_tokens unknown ones within
  // auth.unknown_token_penalty. Always an empty Caller when
  // authentication is off.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context,
                                      DenyReason* why = nullptr);

  // OK when `caller` holds `role` on `ns` (always, when authentication is
  // off); PERMISSION_DENIED naming the identity, the namespace and the
  // role otherwise.
  absl::Status Authorize(const Caller& caller, absl::string_view ns, Role role) const;

  // Any grant at all for the identity: Topology answers every caller that
  // may use some namespace, since clients route with it.
  absl::Status AuthorizeAny(const Caller& caller) const;

  // For a long call (a Stream), before each message: UNAUTHENTICATED once
  // the bearer token it was opened with is no longer in the tokens file.
  // A certificate is checked by TLS when the connection is made;
  // limits.max_connection_age bounds how long a connection lives.
  absl::Status Recheck(const Caller& caller);

 private:
  explicit Authorizer(const AuthSettings& settings);

  // The file's identity and version, to notice a change.
  struct FileStamp {
    int64_t mtime_ns = 0;
    int64_t size = -1;
    uint64_t inode = 0;
    bool operator==(const FileStamp& o) const {
      return mtime_ns == o.mtime_ns && size == o.size && inode == o.inode;
    }
  };
  // The stamp of the file at `path`; the empty stamp when it is missing.
  static FileStamp StampOf(const std::string& path);
  void MaybeReloadTokens() ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<const TokenTable> tokens() const;

  const AuthSettings settings_;
  // Grants by identity.
  absl::flat_hash_map<std::string, std::vector<const Grant*>> grants_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const TokenTable> tokens_ ABSL_GUARDED_BY(mu_);
  FileStamp stamp_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_check_ ABSL_GUARDED_BY(mu_);

  absl::Mutex brake_mu_;
  TokenGuessBrake brake_ ABSL_GUARDED_BY(brake_mu_);
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_AUTHORIZATION_H_
