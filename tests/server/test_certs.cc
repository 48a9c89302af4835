#include "tests/server/test_certs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dedup::server::test {
namespace {

void RunShell(const std::string& command) {
  const int code = std::system((command + " >/dev/null 2>&1").c_str());
  ASSERT_EQ(code, 0) << command;
}

}  // namespace

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TestCerts::TestCerts() {
  MakeCa("ca");
  MakeCa("other-ca");
  MakeCert("ca", "server", "IP:127.0.0.1,DNS:localhost");
  MakeCert("ca", "server-rotated", "IP:127.0.0.1,DNS:localhost");
  MakeCert("ca", "client", "URI:spiffe://test/worker-a");
  MakeCert("other-ca", "stranger", "URI:spiffe://test/stranger");
}

std::string TestCerts::ServerTlsConfig() const {
  return absl::StrCat("tls { cert: '", Pem("server"), "' key: '", Key("server"), "' ca: '",
                      Pem("ca"), "' refresh_interval: '1s' }");
}

void TestCerts::MakeCa(const std::string& name) {
  RunShell(
      absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                   "-days 2 -subj /CN=",
                   name, " -keyout ", Key(name), " -out ", Pem(name)));
}

void TestCerts::MakeCert(const std::string& ca, const std::string& name, const std::string& san,
                         int days) {
  const std::string csr = dir_.Sub(name + ".csr");
  const std::string ext = dir_.Sub(name + ".ext");
  RunShell(absl::StrCat(
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=", name,
      " -keyout ", Key(name), " -out ", csr));
  std::ofstream(ext) << (san.empty() ? "" : "subjectAltName=" + san) << "\n";
  RunShell(absl::StrCat("openssl x509 -req -in ", csr, " -CA ", Pem(ca), " -CAkey ", Key(ca),
                        " -CAcreateserial -days ", days, " -extfile ", ext, " -out ", Pem(name)));
}

}  // namespace dedup::server::test
