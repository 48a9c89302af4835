#include "server/transport_security.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace dedup::server {
namespace {

absl::Status CheckPemFile(const std::string& path, const std::string& field) {
  std::ifstream in(path);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || !absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": cannot read a PEM file at '", path, "'"));
  }
  return absl::OkStatus();
}

// This node's certificate, key and (mutual TLS) CA, checked now and re-read
// from their files as they change: what it serves with and calls peers with.
absl::StatusOr<std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider>>
WatchedCertificates(const TlsSettings& tls) {
  absl::Status s = CheckPemFile(tls.cert, "tls.cert");
  s.Update(CheckPemFile(tls.key, "tls.key"));
  if (tls.mutual()) s.Update(CheckPemFile(tls.ca, "tls.ca"));
  if (!s.ok()) return s;
  const auto refresh_s =
      static_cast<unsigned int>(std::clamp<int64_t>(tls.refresh_interval_ms / 1000, 1, 24 * 3600));
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(tls.key, tls.cert,
                                                                              tls.ca, refresh_s);
}

}  // namespace

bool IsLoopbackListen(absl::string_view listen) {
  absl::string_view host = listen.substr(0, listen.rfind(':'));
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  if (host == "localhost" || host == "::1") return true;
  const std::vector<absl::string_view> octets = absl::StrSplit(host, '.');
  int first = 0;
  return octets.size() == 4 && absl::SimpleAtoi(octets[0], &first) && first == 127;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsSettings& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider>> provider =
      WatchedCertificates(tls);
  if (!provider.ok()) return provider.status();
  grpc::experimental::TlsServerCredentialsOptions options(*provider);
  options.watch_identity_key_cert_pairs();
  if (tls.mutual()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentialsFor(
    const TlsSettings& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider>> provider =
      WatchedCertificates(tls);
  if (!provider.ok()) return provider.status();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(*provider);
  options.watch_identity_key_cert_pairs();
  if (tls.mutual()) options.watch_root_certs();
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace dedup::server
