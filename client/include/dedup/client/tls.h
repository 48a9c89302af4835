#ifndef DEDUP_CLIENT_TLS_H_
#define DEDUP_CLIENT_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace dedup::client {

// PEM files of a TLS connection to dedupd. `ca` is the bundle the server's
// certificate must chain to (empty: the system's roots); `cert` and `key`
// are this client's certificate chain and key for mutual TLS (both or
// neither).
struct TlsFiles {
  std::string ca;
  std::string cert;
  std::string key;
};

// Channel credentials for ClientOptions::credentials, read from `files`
// now (a rotated client certificate needs a new Client). INVALID_ARGUMENT
// when only one of cert and key is given; FAILED_PRECONDITION naming a
// file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(const TlsFiles& files);

// `tls` (from TlsCredentials) also presenting a bearer token on every call,
// as "authorization: Bearer TOKEN", for a server that authenticates callers
// by token (design.md §10). The token is the first line of the file at
// `path`, read now: a rotated token needs a new Client. gRPC sends it only
// over TLS. FAILED_PRECONDITION when the file cannot be read or its first
// line is empty.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> WithBearerTokenFile(
    std::shared_ptr<grpc::ChannelCredentials> tls, const std::string& path);

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_TLS_H_
