#ifndef DEDUP_TESTS_SERVER_TEST_CERTS_H_
#define DEDUP_TESTS_SERVER_TEST_CERTS_H_

// Certificates for TLS tests, made with the openssl command line in a temp
// directory at test time (no key is ever committed): a CA "ca", a second
// CA "other-ca", and certificates signed by them.

#include <string>

#include "tests/common/temp_dir.h"

namespace dedup::server::test {

class TestCerts {
 public:
  // Makes ca, other-ca, server and server-rotated (for 127.0.0.1 and
  // localhost, of ca), client (of ca) and stranger (of other-ca). Fails
  // the current test if openssl does.
  TestCerts();

  // Makes a client certificate NAME of ca with subject alternative names
  // `san` (openssl syntax, e.g. "URI:spiffe://test/x"; empty: none),
  // valid for `days` from now (-1: it expired yesterday).
  void AddClient(const std::string& name, const std::string& san, int days = 2) {
    MakeCert("ca", name, san, days);
  }

  // NAME.pem and NAME.key in the directory.
  std::string Pem(const std::string& name) const { return dir_.Sub(name + ".pem"); }
  std::string Key(const std::string& name) const { return dir_.Sub(name + ".key"); }
  const std::string& dir() const { return dir_.path(); }

  // A config fragment: tls with the server certificate, mutual against ca,
  // refreshed every second.
  std::string ServerTlsConfig() const;

 private:
  void MakeCa(const std::string& name);
  void MakeCert(const std::string& ca, const std::string& name, const std::string& san,
                int days = 2);

  ::dedup::test::TempDir dir_;
};

// The contents of a file.
std::string ReadFile(const std::string& path);

}  // namespace dedup::server::test

#endif  // DEDUP_TESTS_SERVER_TEST_CERTS_H_
