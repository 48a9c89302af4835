#include "dedup/client/tls.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace dedup::client {
namespace {

absl::Status ReadPem(const std::string& path, const char* what, std::string* out) {
  if (path.empty()) return absl::OkStatus();
  std::ifstream in(path);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read the TLS ", what, " '", path, "'"));
  }
  *out = text.str();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(const TlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("TLS: a client certificate and its key go together");
  }
  grpc::SslCredentialsOptions options;
  absl::Status s = ReadPem(files.ca, "CA bundle", &options.pem_root_certs);
  s.Update(ReadPem(files.cert, "certificate", &options.pem_cert_chain));
  s.Update(ReadPem(files.key, "key", &options.pem_private_key));
  if (!s.ok()) return s;
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> WithBearerTokenFile(
    std::shared_ptr<grpc::ChannelCredentials> tls, const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read the bearer token '", path, "'"));
  }
  const std::string token(absl::StripAsciiWhitespace(line));
  if (token.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the bearer token file '", path, "' starts with an empty line"));
  }
  return grpc::CompositeChannelCredentials(std::move(tls), grpc::AccessTokenCredentials(token));
}

}  // namespace dedup::client
