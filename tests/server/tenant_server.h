#ifndef DEDUP_TESTS_SERVER_TENANT_SERVER_H_
#define DEDUP_TESTS_SERVER_TENANT_SERVER_H_

// A server with two identities, tenant-a and tenant-b, each by its bearer
// token and granted every namespace, with small per-identity limits: the
// set-up of the tests of one tenant against another (design.md §10).

#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/authorization.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {

inline constexpr char kNs[] = "orders";
inline constexpr char kTokenA[] = "token-of-tenant-a-0123456789abcdef";
inline constexpr char kTokenB[] = "token-of-tenant-b-0123456789abcdef";

class TenantFairnessTest : public ServerTest {
 protected:
  void SetUp() override {
    std::ofstream(tokens_) << "tenant-a sha256:" << Sha256Hex(kTokenA) << "\n"
                           << "tenant-b sha256:" << Sha256Hex(kTokenB) << "\n";
    ServerTest::SetUp();
  }

  std::string Config() const override {
    return absl::StrCat("durability: 'buffered' execution: '", execution_, "' workers: ", workers_,
                        " limits { max_open_streams: 16 max_open_streams_per_identity: 4"
                        " max_queued_tasks_per_identity: 4 ",
                        extra_limits_,
                        " }"
                        " auth { tokens_file: '",
                        tokens_,
                        "' grants { identity: 'tenant-a' namespaces: '*' roles: 'claim' }"
                        " grants { identity: 'tenant-b' namespaces: '*' roles: 'claim' } }");
  }

  static std::unique_ptr<grpc::ClientContext> ContextOf(const char* token) {
    std::unique_ptr<grpc::ClientContext> context = NewContext();
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    return context;
  }

  grpc::Status ClaimAs(const char* token, const std::string& key) {
    return ClaimAs(stub(), token, key);
  }
  static grpc::Status ClaimAs(v1::Dedup::Stub& stub, const char* token, const std::string& key) {
    v1::ClaimResponse response;
    return stub.Claim(ContextOf(token).get(), ClaimOf(kNs, key, "w"), &response);
  }
  // A client on a connection of its own, as another tenant's process has
  // (the channel argument keeps gRPC from sharing the test's connection).
  std::unique_ptr<v1::Dedup::Stub> OwnConnection() {
    grpc::ChannelArguments args;
    args.SetInt("dedup.test.own_connection", 1);
    return v1::Dedup::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->server().port()),
                                  grpc::InsecureChannelCredentials(), args));
  }

  // Opens a Stream as `token` and runs one Query through it; OK while the
  // call stays open.
  grpc::Status Open(const char* token, OpenStream* open) {
    open->context = ContextOf(token);
    return OpenWithQuery(stub(), kNs, open);
  }
  static void Close(OpenStream* open) {
    open->stream->WritesDone();
    open->stream->Finish();
  }

  int workers_ = 1;
  // More fields of `limits`, in text format.
  std::string extra_limits_;
  std::string execution_ = "workers";
  ::dedup::test::TempDir dir_;
  std::string tokens_ = dir_.Sub("tokens");
};

}  // namespace dedup::server::test

#endif  // DEDUP_TESTS_SERVER_TENANT_SERVER_H_
