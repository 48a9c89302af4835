#ifndef DEDUP_SERVER_TRANSPORT_SECURITY_H_
#define DEDUP_SERVER_TRANSPORT_SECURITY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace dedup::server {

// TLS of the gRPC listener (design.md §10). Empty cert: plaintext.
struct TlsSettings {
  std::string cert;  // PEM certificate chain.
  std::string key;   // PEM private key.
  std::string ca;    // PEM CA bundle; set: clients must present a certificate it verifies.
  int64_t refresh_interval_ms = 60'000;

  bool enabled() const { return !cert.empty(); }
  bool mutual() const { return !ca.empty(); }
};

// Whether `listen` ("host:port") names a loopback host: 127.0.0.0/8,
// [::1] or localhost.
bool IsLoopbackListen(absl::string_view listen);

// Server credentials for `tls`: insecure when it is not enabled, otherwise
// TLS from files watched for changes every refresh interval, requiring and
// verifying a client certificate when `tls.mutual()`. FAILED_PRECONDITION
// naming the file when one cannot be read or holds no PEM block.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsSettings& tls);

// How a node of a replicated cluster calls its peers: insecure when `tls`
// is not enabled, otherwise TLS presenting this node's own certificate and
// verifying the peer's against `tls.ca` (the system roots when unset), the
// files watched for changes like the server's.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentialsFor(
    const TlsSettings& tls);

}  // namespace dedup::server

#endif  // DEDUP_SERVER_TRANSPORT_SECURITY_H_
