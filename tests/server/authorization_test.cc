// Authentication and per-namespace authorization (design.md §10): every RPC
// against every kind of caller, with identities from client certificates
// (mutual TLS) and from bearer tokens (server TLS); a claim that another
// identity cannot complete, release or extend; the tokens file reloaded
// when it changes; and the parts on their own (token digests, the file
// format, certificate identities).

#include "server/authorization.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/metric_family.h"
#include "tests/server/test_certs.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "payments";

// The callers of the matrix, by what they are granted.
enum class Who { kNobody, kUngranted, kClaimer, kAdmin, kReader, kScanner, kOperator };

const char* WhoName(Who who) {
  switch (who) {
    case Who::kNobody:
      return "no identity";
    case Who::kUngranted:
      return "identity without grant";
    case Who::kClaimer:
      return "claim grant";
    case Who::kAdmin:
      return "admin grant";
    case Who::kReader:
      return "read grant";
    case Who::kScanner:
      return "scan grant";
    case Who::kOperator:
      return "cluster grant";
  }
  return "?";
}

// How callers prove who they are.
enum class Transport { kMutualTls, kBearerToken };

// Bearer tokens of the test, and the file line of each.
constexpr char kTokenA[] = "tok-worker-a-5a0c1f7e9b2d4c36";
constexpr char kTokenB[] = "tok-worker-b-77e1d9a3c5f04b28";
constexpr char kTokenOps[] = "tok-ops-0f3b8a61d2c94e57";
constexpr char kTokenNobody[] = "tok-nobody-c41e95b7a6d8f203";
constexpr char kTokenReader[] = "tok-reader-9d2e61a0b7c34f85";
constexpr char kTokenScanner[] = "tok-scanner-3b8f07c2e91d4a66";
constexpr char kTokenOperator[] = "tok-operator-e05a4d93c1b27f48";

std::string TokenLine(const std::string& identity, const std::string& token) {
  return absl::StrCat(identity, " sha256:", Sha256Hex(token), "\n");
}

// Grants: worker-a and worker-b may claim in payments, ops is admin of
// every namespace, reader may only read payments, scanner may only scan
// and operator may only move replicas; nobody has no grant at all.
constexpr char kGrants[] = R"pb(
  grants { identity: "spiffe://test/worker-a" namespaces: "payments" roles: "claim" }
  grants { identity: "spiffe://test/worker-b" namespaces: "payments" roles: "claim" }
  grants { identity: "spiffe://test/ops" namespaces: "*" roles: "admin" }
  grants { identity: "dns:worker-c.test" namespaces: "payments" roles: "claim" }
  grants { identity: "spiffe://test/reader" namespaces: "payments" roles: "read" }
  grants { identity: "spiffe://test/scanner" namespaces: "*" roles: "scan" }
  grants { identity: "spiffe://test/operator" namespaces: "*" roles: "cluster" }
)pb";

class AuthorizationTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    certs_.AddClient("worker-b", "URI:spiffe://test/worker-b");
    certs_.AddClient("ops", "URI:spiffe://test/ops");
    certs_.AddClient("nobody", "URI:spiffe://test/nobody");
    certs_.AddClient("anonymous", "");
    certs_.AddClient("reader", "URI:spiffe://test/reader");
    certs_.AddClient("scanner", "URI:spiffe://test/scanner");
    certs_.AddClient("operator", "URI:spiffe://test/operator");
    if (GetParam() == Transport::kMutualTls) {
      certs_.AddClient("dns-imposter", "DNS:spiffe://test/worker-b");
      certs_.AddClient("worker-c", "DNS:worker-c.test");
    }
    tokens_file_ = certs_.dir() + "/tokens";
    std::ofstream(tokens_file_) << "# identity and the SHA-256 of its token\n"
                                << TokenLine("spiffe://test/worker-a", kTokenA)
                                << TokenLine("spiffe://test/worker-b", kTokenB)
                                << TokenLine("spiffe://test/ops", kTokenOps)
                                << TokenLine("spiffe://test/nobody", kTokenNobody)
                                << TokenLine("spiffe://test/reader", kTokenReader)
                                << TokenLine("spiffe://test/scanner", kTokenScanner)
                                << TokenLine("spiffe://test/operator", kTokenOperator);
    const std::string tls = GetParam() == Transport::kMutualTls
                                ? certs_.ServerTlsConfig()
                                : absl::StrCat("tls { cert: '", certs_.Pem("server"), "' key: '",
                                               certs_.Key("server"), "' }");
    const std::string config = absl::StrCat("durability: 'buffered' namespaces { name: '", kNs,
                                            "' } ", tls, " auth { tokens_file: '", tokens_file_,
                                            "' refresh_interval: '100ms' max_unknown_tokens: 5 ",
                                            "unknown_token_penalty: '500ms' ", kGrants, " }");
    absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(config, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // A stub for `who` over this test's transport, on a connection of its own.
  std::unique_ptr<v1::Dedup::Stub> StubFor(Who who) {
    static const char* const kCert[] = {"anonymous", "nobody",  "client",  "ops",
                                        "reader",    "scanner", "operator"};
    static const char* const kToken[] = {"",           kTokenNobody,  kTokenA,       kTokenOps,
                                         kTokenReader, kTokenScanner, kTokenOperator};
    const int i = static_cast<int>(who);
    return GetParam() == Transport::kMutualTls ? StubWith(kCert[i], "") : StubWith("", kToken[i]);
  }

  // A stub presenting client certificate `cert` (mutual TLS) or bearer
  // `token` (server TLS); either may be empty.
  std::unique_ptr<v1::Dedup::Stub> StubWith(const std::string& cert, const std::string& token) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ReadFile(certs_.Pem("ca"));
    if (!cert.empty()) {
      options.pem_private_key = ReadFile(certs_.Key(cert));
      options.pem_cert_chain = ReadFile(certs_.Pem(cert));
    }
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(options);
    if (!token.empty()) {
      credentials =
          grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(token));
    }
    grpc::ChannelArguments args;
    args.SetInt("dedup.test.connection", ++connections_);
    return v1::Dedup::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->server().port()), credentials, args));
  }

  // The stub of worker-a (claim in payments) and of worker-b (the same
  // grant, another identity).
  std::unique_ptr<v1::Dedup::Stub> WorkerA() {
    return GetParam() == Transport::kMutualTls ? StubWith("client", "") : StubWith("", kTokenA);
  }
  std::unique_ptr<v1::Dedup::Stub> WorkerB() {
    return GetParam() == Transport::kMutualTls ? StubWith("worker-b", "") : StubWith("", kTokenB);
  }

  // dedup_auth_denied_total for `ns` and `reason`.
  double Denied(const std::string& ns, const std::string& reason) {
    for (const prometheus::MetricFamily& family :
         server_->server().metrics()->registry()->Collect()) {
      if (family.name != "dedup_auth_denied_total") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        int matched = 0;
        for (const prometheus::ClientMetric::Label& label : metric.label) {
          if ((label.name == "namespace" && label.value == ns) ||
              (label.name == "reason" && label.value == reason)) {
            ++matched;
          }
        }
        if (matched == 2) return metric.counter.value;
      }
    }
    return 0;
  }

  TestCerts certs_;
  std::string tokens_file_;
  std::unique_ptr<TestServer> server_;
  int connections_ = 0;
};

// The status of each RPC for one caller. Batch and Stream carry one item,
// whose own code is reported when the call itself succeeds.
struct Codes {
  grpc::StatusCode claim, complete, release, extend, query, batch_item, stream_item, scan, topology;
};

Codes CallEverything(v1::Dedup::Stub& stub, const std::string& key) {
  Codes codes{};
  {
    v1::ClaimResponse response;
    codes.claim =
        stub.Claim(NewContext().get(), ClaimOf(kNs, key, "owner"), &response).error_code();
  }
  {
    v1::CompleteResponse response;
    codes.complete =
        stub.Complete(NewContext().get(), CompleteOf(kNs, key + "-c", 1, "r"), &response)
            .error_code();
  }
  {
    v1::ReleaseResponse response;
    codes.release =
        stub.Release(NewContext().get(), ReleaseOf(kNs, key + "-r", 1), &response).error_code();
  }
  {
    v1::ExtendResponse response;
    codes.extend =
        stub.Extend(NewContext().get(), ExtendOf(kNs, key + "-e", 1), &response).error_code();
  }
  {
    v1::QueryResponse response;
    codes.query = stub.Query(NewContext().get(), QueryOf(kNs, key), &response).error_code();
  }
  v1::BatchRequest batch;
  *batch.add_operations() = Op(QueryOf(kNs, key));
  {
    v1::BatchResponse response;
    const grpc::Status status = stub.Batch(NewContext().get(), batch, &response);
    codes.batch_item = !status.ok() ? status.error_code()
                       : response.results(0).has_error()
                           ? static_cast<grpc::StatusCode>(response.results(0).error().code())
                           : grpc::StatusCode::OK;
  }
  {
    std::unique_ptr<grpc::ClientContext> context = NewContext();
    auto stream = stub.Stream(context.get());
    v1::BatchResponse response;
    const bool answered = stream->Write(batch) && stream->Read(&response);
    stream->WritesDone();
    const grpc::Status status = stream->Finish();
    codes.stream_item = !answered ? (status.ok() ? grpc::StatusCode::UNKNOWN : status.error_code())
                        : response.results(0).has_error()
                            ? static_cast<grpc::StatusCode>(response.results(0).error().code())
                            : grpc::StatusCode::OK;
  }
  {
    grpc::Status status;
    ScanAll(stub, ScanOf(kNs), &status);
    codes.scan = status.error_code();
  }
  {
    v1::TopologyResponse response;
    codes.topology =
        stub.Topology(NewContext().get(), v1::TopologyRequest(), &response).error_code();
  }
  return codes;
}

TEST_P(AuthorizationTest, EachRpcGivesTheExactCodeForEachKindOfCaller) {
  using grpc::StatusCode;
  constexpr StatusCode U = StatusCode::UNAUTHENTICATED;
  constexpr StatusCode D = StatusCode::PERMISSION_DENIED;
  constexpr StatusCode K = StatusCode::OK;
  const struct {
    Who who;
    Codes want;
  } kMatrix[] = {
      //                claim complete release extend query batch stream scan topology
      {Who::kNobody, {U, U, U, U, U, U, U, U, U}},   {Who::kUngranted, {D, D, D, D, D, D, D, D, D}},
      {Who::kClaimer, {K, K, K, K, K, K, K, D, K}},  {Who::kAdmin, {D, D, D, D, D, D, D, K, K}},
      {Who::kReader, {D, D, D, D, K, K, K, D, K}},   {Who::kScanner, {D, D, D, D, D, D, D, K, K}},
      {Who::kOperator, {D, D, D, D, D, D, D, D, K}},
  };
  for (const auto& row : kMatrix) {
    SCOPED_TRACE(WhoName(row.who));
    const Codes got = CallEverything(*StubFor(row.who), absl::StrCat("key-", WhoName(row.who)));
    EXPECT_EQ(got.claim, row.want.claim) << "Claim";
    EXPECT_EQ(got.complete, row.want.complete) << "Complete";
    EXPECT_EQ(got.release, row.want.release) << "Release";
    EXPECT_EQ(got.extend, row.want.extend) << "Extend";
    EXPECT_EQ(got.query, row.want.query) << "Query";
    EXPECT_EQ(got.batch_item, row.want.batch_item) << "Batch";
    EXPECT_EQ(got.stream_item, row.want.stream_item) << "Stream";
    EXPECT_EQ(got.scan, row.want.scan) << "Scan";
    EXPECT_EQ(got.topology, row.want.topology) << "Topology";
  }
  // Refused for want of a grant, under the namespace: the five unary calls
  // of the ungranted, admin, scan and cluster identities and the four
  // writes of the reader; Scan of the ungranted, claim, read and cluster
  // identities; the Batch and Stream items of the admin, scan and cluster
  // identities. The identity without any grant has its Batch and Stream
  // refused whole, before any item is read (and Topology): counted as
  // "other".
  EXPECT_EQ(Denied(kNs, "no_grant"), 4 * 5 + 4 + 4 + 3 * 2);
  EXPECT_EQ(Denied("other", "no_grant"), 3);
}

// Moving replicas takes the cluster role on "*" (admin includes it); a
// single node answers FAILED_PRECONDITION to whoever gets past that.
TEST_P(AuthorizationTest, OnlyTheClusterRoleMovesReplicas) {
  const struct {
    Who who;
    grpc::StatusCode want;
  } kCases[] = {
      {Who::kOperator, grpc::StatusCode::FAILED_PRECONDITION},
      {Who::kAdmin, grpc::StatusCode::FAILED_PRECONDITION},
      {Who::kScanner, grpc::StatusCode::PERMISSION_DENIED},
      {Who::kReader, grpc::StatusCode::PERMISSION_DENIED},
      {Who::kClaimer, grpc::StatusCode::PERMISSION_DENIED},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(WhoName(c.who));
    std::unique_ptr<v1::Dedup::Stub> stub = StubFor(c.who);
    v1::MoveShardRequest move;
    move.set_shard(0);
    move.set_from(0);
    move.set_to(1);
    v1::MoveShardResponse moved;
    const grpc::Status move_status = stub->MoveShard(NewContext().get(), move, &moved);
    EXPECT_EQ(move_status.error_code(), c.want) << move_status.error_message();
    v1::SetDrainingRequest drain;
    drain.set_node(0);
    drain.set_draining(true);
    v1::SetDrainingResponse drained;
    const grpc::Status drain_status = stub->SetDraining(NewContext().get(), drain, &drained);
    EXPECT_EQ(drain_status.error_code(), c.want) << drain_status.error_message();
    if (c.want == grpc::StatusCode::PERMISSION_DENIED) {
      EXPECT_THAT(move_status.error_message(), ::testing::HasSubstr("no 'cluster' grant"));
    }
  }
}

TEST_P(AuthorizationTest, DenialsNameTheIdentityTheNamespaceAndTheMissingGrant) {
  v1::ClaimResponse response;
  const grpc::Status denied =
      StubFor(Who::kAdmin)->Claim(NewContext().get(), ClaimOf(kNs, "k", "o"), &response);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(denied.error_message(),
            "identity 'spiffe://test/ops' has no 'claim' grant on namespace 'payments'");

  const grpc::Status unauthenticated =
      StubFor(Who::kNobody)->Claim(NewContext().get(), ClaimOf(kNs, "k", "o"), &response);
  EXPECT_EQ(unauthenticated.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(unauthenticated.error_message(), ::testing::HasSubstr("no identity"));
  EXPECT_EQ(Denied(kNs, "unauthenticated"), 1);
}

TEST_P(AuthorizationTest, AnotherIdentityCanNeitherUseNorLearnAClaimsToken) {
  auto a = WorkerA();
  auto b = WorkerB();
  v1::ClaimResponse claimed;
  ASSERT_TRUE(a->Claim(NewContext().get(), ClaimOf(kNs, "order-1", "worker"), &claimed).ok());
  ASSERT_EQ(claimed.outcome(), v1::ClaimResponse::ACQUIRED);
  const uint64_t token = claimed.token();

  // B names A's owner: no re-entry, and no token.
  v1::ClaimResponse reentry;
  ASSERT_TRUE(b->Claim(NewContext().get(), ClaimOf(kNs, "order-1", "worker"), &reentry).ok());
  EXPECT_EQ(reentry.outcome(), v1::ClaimResponse::IN_PROGRESS);
  EXPECT_EQ(reentry.token(), 0u);
  v1::QueryResponse query;
  ASSERT_TRUE(b->Query(NewContext().get(), QueryOf(kNs, "order-1"), &query).ok());
  EXPECT_EQ(query.record().token(), 0u);

  // B has the token anyway (tokens count up per key): every use is refused,
  // answered exactly as a guess that is not the newest token is, so that
  // guessing cannot find the live one.
  v1::CompleteResponse complete;
  v1::CompleteResponse complete_guess;
  ASSERT_THAT(
      b->Complete(NewContext().get(), CompleteOf(kNs, "order-1", token, "forged"), &complete),
      IsOk());
  ASSERT_THAT(b->Complete(NewContext().get(), CompleteOf(kNs, "order-1", token + 1000, "forged"),
                          &complete_guess),
              IsOk());
  EXPECT_EQ(complete.outcome(), v1::CompleteResponse::STALE_TOKEN);
  EXPECT_EQ(complete.SerializeAsString(), complete_guess.SerializeAsString())
      << complete.ShortDebugString() << " vs " << complete_guess.ShortDebugString();
  for (int i = 0; i < 5; ++i) {
    v1::ReleaseResponse release;
    v1::ReleaseResponse release_guess;
    ASSERT_THAT(b->Release(NewContext().get(), ReleaseOf(kNs, "order-1", token), &release), IsOk());
    ASSERT_THAT(
        b->Release(NewContext().get(), ReleaseOf(kNs, "order-1", token + 1 + i), &release_guess),
        IsOk());
    EXPECT_EQ(release.outcome(), v1::ReleaseResponse::STALE_TOKEN);
    EXPECT_EQ(release.SerializeAsString(), release_guess.SerializeAsString());
  }
  v1::ExtendResponse extend;
  v1::ExtendResponse extend_guess;
  ASSERT_THAT(b->Extend(NewContext().get(), ExtendOf(kNs, "order-1", token), &extend), IsOk());
  ASSERT_THAT(b->Extend(NewContext().get(), ExtendOf(kNs, "order-1", token + 7), &extend_guess),
              IsOk());
  EXPECT_EQ(extend.outcome(), v1::ExtendResponse::STALE_TOKEN);
  EXPECT_EQ(extend.SerializeAsString(), extend_guess.SerializeAsString());
  v1::BatchRequest batch;
  *batch.add_operations() = Op(CompleteOf(kNs, "order-1", token, "forged in a batch"));
  *batch.add_operations() = Op(CompleteOf(kNs, "order-1", token + 1, "forged in a batch"));
  v1::BatchResponse answered;
  ASSERT_TRUE(b->Batch(NewContext().get(), batch, &answered).ok());
  ASSERT_EQ(answered.results_size(), 2);
  EXPECT_FALSE(answered.results(0).has_error()) << answered.results(0).ShortDebugString();
  EXPECT_EQ(answered.results(0).SerializeAsString(), answered.results(1).SerializeAsString());
  EXPECT_EQ(Denied(kNs, "not_holder"), 1 + 5 + 1 + 1);

  // A's claim is untouched: A completes it with its own result.
  v1::CompleteResponse done;
  ASSERT_TRUE(
      a->Complete(NewContext().get(), CompleteOf(kNs, "order-1", token, "charged"), &done).ok());
  EXPECT_EQ(done.outcome(), v1::CompleteResponse::OK);
  ASSERT_TRUE(b->Query(NewContext().get(), QueryOf(kNs, "order-1"), &query).ok());
  EXPECT_EQ(query.record().result(), "charged");
  // And A, the holder, still has its token back from a repeated Claim.
  v1::ClaimResponse again;
  ASSERT_TRUE(a->Claim(NewContext().get(), ClaimOf(kNs, "order-2", "worker"), &claimed).ok());
  ASSERT_TRUE(a->Claim(NewContext().get(), ClaimOf(kNs, "order-2", "worker"), &again).ok());
  EXPECT_EQ(again.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(again.token(), claimed.token());
}

// A URI has a ':' and a host name none: a certificate whose DNS name reads
// like a granted URI has no identity at all, and a typed "dns:" grant
// admits a certificate's real host name.
// Identities from certificates: a bearer token names neither a DNS nor a
// URI identity, so these run over mutual TLS only.
class CertificateIdentityTest : public AuthorizationTest {};

TEST_P(CertificateIdentityTest, ADnsNameNeverStandsInForAUriIdentity) {
  v1::ClaimResponse claimed;
  const grpc::Status imposter =
      StubWith("dns-imposter", "")
          ->Claim(NewContext().get(), ClaimOf(kNs, "order-9", "worker"), &claimed);
  EXPECT_EQ(imposter.error_code(), grpc::StatusCode::UNAUTHENTICATED) << imposter.error_message();
  EXPECT_THAT(StubWith("worker-c", "")
                  ->Claim(NewContext().get(), ClaimOf(kNs, "order-9", "worker"), &claimed),
              IsOk());
  EXPECT_EQ(claimed.outcome(), v1::ClaimResponse::ACQUIRED);
}

INSTANTIATE_TEST_SUITE_P(Transports, AuthorizationTest,
                         ::testing::Values(Transport::kMutualTls, Transport::kBearerToken),
                         [](const ::testing::TestParamInfo<Transport>& info) {
                           return info.param == Transport::kMutualTls ? "MutualTls" : "BearerToken";
                         });

// --- Bearer tokens on their own ---

class BearerTokenTest : public AuthorizationTest {};

TEST_P(BearerTokenTest, AnUnknownTokenIsUnauthenticatedAndANewOneWorksOnceTheFileChanges) {
  constexpr char kNewToken[] = "tok-worker-a-rotated-93d1e0f8a2";
  v1::QueryResponse response;
  const grpc::Status before =
      StubWith("", kNewToken)->Query(NewContext().get(), QueryOf(kNs, "k"), &response);
  EXPECT_EQ(before.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(before.error_message(), "bearer token not recognized");

  // Written to a new file and renamed over the old one, as a mounted
  // Secret changes.
  const std::string next = tokens_file_ + ".next";
  std::ofstream(next) << TokenLine("spiffe://test/worker-a", kNewToken);
  std::filesystem::rename(next, tokens_file_);
  grpc::Status after;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = StubWith("", kNewToken)->Query(NewContext().get(), QueryOf(kNs, "k"), &response);
  } while (!after.ok() && std::chrono::steady_clock::now() < give_up);
  EXPECT_TRUE(after.ok()) << after.error_code() << " " << after.error_message();
  // The old token is gone with the old file.
  EXPECT_EQ(
      StubWith("", kTokenA)->Query(NewContext().get(), QueryOf(kNs, "k"), &response).error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
}

// The brake on guessing: once an address has presented 5 unknown tokens
// within the penalty (500 ms here), its calls with any bearer token, the
// right one too, are refused without a look-up until the penalty has
// passed since the last unknown one. Each refusal is counted by reason.
TEST_P(BearerTokenTest, GuessingTokensFromOneAddressIsBraked) {
  v1::QueryResponse response;
  for (int i = 0; i < 5; ++i) {
    const grpc::Status guess = StubWith("", absl::StrCat("guess-", i, "-0123456789abcdef"))
                                   ->Query(NewContext().get(), QueryOf(kNs, "k"), &response);
    EXPECT_EQ(guess.error_message(), "bearer token not recognized");
  }
  const grpc::Status braked =
      StubWith("", kTokenA)->Query(NewContext().get(), QueryOf(kNs, "k"), &response);
  EXPECT_EQ(braked.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(braked.error_message(),
              ::testing::HasSubstr("too many unknown bearer tokens from this address"));
  EXPECT_EQ(Denied(kNs, "unknown_token"), 5);
  EXPECT_EQ(Denied(kNs, "throttled"), 1);
  EXPECT_EQ(Denied(kNs, "unauthenticated"), 0);

  // Once the penalty has passed, the right token is served again.
  grpc::Status after;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = StubWith("", kTokenA)->Query(NewContext().get(), QueryOf(kNs, "k"), &response);
  } while (!after.ok() && std::chrono::steady_clock::now() < give_up);
  EXPECT_TRUE(after.ok()) << after.error_message();
}

// A brake after 3 unknown tokens within 10 s, and a time to start from.
TokenGuessBrake BrakeAfterThree() {
  TokenGuessBrake::Options options;
  options.max_unknown = 3;
  options.penalty = absl::Seconds(10);
  return TokenGuessBrake(options);
}
constexpr absl::Time kBrakeStart = absl::FromUnixSeconds(1'700'000'000);

TEST(TokenGuessBrakeTest, BrakesAfterTheLimitUntilThePenaltyPassesSinceTheLastGuess) {
  TokenGuessBrake brake = BrakeAfterThree();
  const absl::Time t0 = kBrakeStart;
  brake.RecordUnknown("10.0.0.1", t0);
  brake.RecordUnknown("10.0.0.1", t0 + absl::Seconds(1));
  EXPECT_FALSE(brake.Braked("10.0.0.1", t0 + absl::Seconds(2)));
  brake.RecordUnknown("10.0.0.1", t0 + absl::Seconds(2));
  EXPECT_TRUE(brake.Braked("10.0.0.1", t0 + absl::Seconds(2)));
  EXPECT_FALSE(brake.Braked("10.0.0.2", t0 + absl::Seconds(2))) << "per address";
  EXPECT_TRUE(brake.Braked("10.0.0.1", t0 + absl::Seconds(11)));
  EXPECT_FALSE(brake.Braked("10.0.0.1", t0 + absl::Seconds(12)));
  // Guesses spread wider than the penalty never brake.
  for (int i = 0; i < 10; ++i) brake.RecordUnknown("10.0.0.3", t0 + absl::Seconds(11 * i));
  EXPECT_FALSE(brake.Braked("10.0.0.3", t0 + absl::Seconds(99)));
}

// Peers count by source: IPv4 by address (also mapped into IPv6, or
// translated by NAT64), IPv6 by address and by /64, as gRPC writes them (it
// escapes an IPv6 address's brackets) or as plain addresses.
TEST(PeerAddressKeysTest, IPv4ByAddressAndIPv6ByAddressAndSlash64) {
  auto host = [](absl::string_view peer) { return PeerAddressKeys(peer).host; };
  auto prefix = [](absl::string_view peer) { return PeerAddressKeys(peer).prefix; };
  EXPECT_EQ(host("ipv4:127.0.0.1:5000"), "127.0.0.1");
  EXPECT_EQ(host("ipv4:10.0.0.7"), "10.0.0.7");
  EXPECT_EQ(host("10.0.0.7:41234"), "10.0.0.7");
  EXPECT_EQ(host("10.0.0.7"), "10.0.0.7");
  EXPECT_EQ(prefix("ipv4:10.0.0.7:5000"), "") << "IPv4 has no prefix key";

  EXPECT_EQ(host("ipv6:%5B2001:db8::1%5D:5000"), "2001:db8::1");
  EXPECT_EQ(prefix("ipv6:%5B2001:db8::1%5D:5000"), "2001:db8::/64");
  EXPECT_EQ(prefix("ipv6:[2001:db8::1]:5000"), "2001:db8::/64");
  EXPECT_EQ(prefix("[2001:db8::1]:5000"), "2001:db8::/64");
  EXPECT_EQ(prefix("2001:db8::1"), "2001:db8::/64");
  EXPECT_EQ(host("ipv6:%5B2001:0db8:0000:0001:aaaa:bbbb:cccc:dddd%5D:5000"),
            "2001:db8:0:1:aaaa:bbbb:cccc:dddd")
      << "written in full";
  EXPECT_EQ(prefix("ipv6:%5B2001:0db8:0000:0001:aaaa:bbbb:cccc:dddd%5D:5000"), "2001:db8:0:1::/64");
  EXPECT_EQ(prefix("ipv6:[2001:db8:0:1:ffff::2]:6000"), "2001:db8:0:1::/64")
      << "another host of the same /64";
  EXPECT_NE(prefix("ipv6:[2001:db8:0:2::1]:5000"), prefix("2001:db8:0:1::1")) << "the next /64";
  EXPECT_EQ(prefix("ipv6:%5B::1%5D:5000"), "::/64");
  EXPECT_EQ(host("ipv6:%5Bfe80::1%25eth0%5D:5000"), "fe80::1") << "with a zone";

  EXPECT_EQ(host("ipv6:%5B::ffff:10.0.0.7%5D:5000"), "10.0.0.7") << "IPv4-mapped";
  EXPECT_EQ(prefix("ipv6:%5B::ffff:10.0.0.7%5D:5000"), "");
  EXPECT_EQ(host("ipv6:[::ffff:10.0.0.7]:5000"), "10.0.0.7");
  EXPECT_EQ(host("::ffff:a00:7"), "10.0.0.7");
  EXPECT_NE(host("::ffff:10.0.0.7"), host("::ffff:10.0.0.8"));
  EXPECT_EQ(host("ipv6:[64:ff9b::a00:7]:5000"), "10.0.0.7") << "NAT64";
  EXPECT_EQ(prefix("ipv6:[64:ff9b::a00:7]:5000"), "");

  EXPECT_EQ(host("unix:/run/dedupd.sock"), "unix:/run/dedupd.sock");
  EXPECT_EQ(host(""), "");
}

// One address of a /64 is braked after max_unknown unknown tokens, and its
// neighbours are not; the /64 as a whole is braked after
// max_unknown_per_prefix, whichever of its addresses sent them; the next
// /64 is not. IPv4 and its mapped form share one count.
TEST(TokenGuessBrakeTest, AnIPv6AddressCountsAloneAndItsSlash64AsAWhole) {
  TokenGuessBrake::Options options;
  options.max_unknown = 3;
  options.max_unknown_per_prefix = 12;
  options.penalty = absl::Seconds(10);
  TokenGuessBrake brake(options);
  const absl::Time t0 = kBrakeStart;
  for (int i = 0; i < 3; ++i) brake.RecordUnknown("ipv6:%5B2001:db8:0:1::1%5D:40001", t0);
  EXPECT_TRUE(brake.Braked("ipv6:%5B2001:db8:0:1::1%5D:40009", t0)) << "the guessing address";
  EXPECT_FALSE(brake.Braked("ipv6:%5B2001:db8:0:1::2%5D:40002", t0))
      << "a neighbour in its /64 that guessed nothing";
  // Nine more, each from another address of the /64, two or fewer each.
  for (int i = 0; i < 9; ++i) {
    brake.RecordUnknown(absl::StrCat("ipv6:[2001:db8:0:1::", 100 + i / 2, "]:5000"), t0);
  }
  EXPECT_TRUE(brake.Braked("ipv6:%5B2001:db8:0:1:dead:beef:0:7%5D:40007", t0))
      << "the /64 as a whole";
  EXPECT_FALSE(brake.Braked("ipv6:%5B2001:db8:0:2::1%5D:40001", t0)) << "the next /64";

  for (int i = 0; i < 3; ++i) brake.RecordUnknown("ipv4:10.0.0.7:5000", t0);
  EXPECT_TRUE(brake.Braked("ipv6:%5B::ffff:10.0.0.7%5D:6000", t0)) << "IPv4-mapped";
  EXPECT_FALSE(brake.Braked("ipv4:10.0.0.8:5000", t0));
}

TEST_P(BearerTokenTest, AnUnreadableFileKeepsTheTokensLoadedBefore) {
  std::ofstream(tokens_file_) << "spiffe://test/worker-a not-a-digest\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Past the refresh interval.
  v1::QueryResponse response;
  const grpc::Status status =
      StubWith("", kTokenA)->Query(NewContext().get(), QueryOf(kNs, "k"), &response);
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
}

TEST_P(BearerTokenTest, AStreamEndsWhenItsTokenIsRevoked) {
  auto stub = StubWith("", kTokenA);
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub->Stream(context.get());
  v1::BatchRequest batch;
  *batch.add_operations() = Op(QueryOf(kNs, "k"));
  v1::BatchResponse response;
  ASSERT_TRUE(stream->Write(batch) && stream->Read(&response));
  EXPECT_FALSE(response.results(0).has_error());

  // worker-a's token leaves the file; the others stay.
  const std::string next = tokens_file_ + ".next";
  std::ofstream(next) << TokenLine("spiffe://test/worker-b", kTokenB);
  std::filesystem::rename(next, tokens_file_);
  int answered = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up && stream->Write(batch) &&
         stream->Read(&response)) {
    ++answered;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << status.error_message() << " after " << answered << " more batches";
  EXPECT_EQ(status.error_message(), "bearer token revoked while the call was open");
}

TEST_P(BearerTokenTest, TheSchemeIsCaseInsensitiveButTwoHeadersAreRefused) {
  auto stub = StubWith("", "");  // TLS, no call credentials: headers set by hand.
  v1::QueryResponse response;
  std::unique_ptr<grpc::ClientContext> lower = NewContext();
  lower->AddMetadata("authorization", absl::StrCat("bearer ", kTokenA));
  const grpc::Status accepted = stub->Query(lower.get(), QueryOf(kNs, "k"), &response);
  EXPECT_TRUE(accepted.ok()) << accepted.error_message();

  std::unique_ptr<grpc::ClientContext> twice = NewContext();
  twice->AddMetadata("authorization", absl::StrCat("Bearer ", kTokenA));
  twice->AddMetadata("authorization", absl::StrCat("Bearer ", kTokenB));
  const grpc::Status refused = stub->Query(twice.get(), QueryOf(kNs, "k"), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("one authorization header"));

  std::unique_ptr<grpc::ClientContext> basic = NewContext();
  basic->AddMetadata("authorization", "Basic d29ya2VyOnNlY3JldA==");
  EXPECT_EQ(stub->Query(basic.get(), QueryOf(kNs, "k"), &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

INSTANTIATE_TEST_SUITE_P(Tls, BearerTokenTest, ::testing::Values(Transport::kBearerToken));
INSTANTIATE_TEST_SUITE_P(Tls, CertificateIdentityTest, ::testing::Values(Transport::kMutualTls));

// --- The parts ---

TEST(AuthorizationPartsTest, Sha256HexMatchesTheStandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AuthorizationPartsTest, ParseTokensReadsDigestsAndRefusesAnythingElse) {
  const std::string digest = Sha256Hex("secret");
  absl::StatusOr<TokenTable> table =
      ParseTokens(absl::StrCat("# comment\n\n  id-a  sha256:", digest, "  # trailing\n"), "f");
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->size(), 1u);
  EXPECT_EQ(table->at(digest), "id-a");

  for (const std::string& bad :
       {absl::StrCat("id-a ", digest),   // no sha256: prefix
        std::string("id-a sha256:abc"),  // too short
        absl::StrCat("id-a sha256:", std::string(64, 'g')),
        absl::StrCat("id-a sha256:", digest, " extra"), std::string("secret-in-the-clear")}) {
    absl::StatusOr<TokenTable> refused = ParseTokens(absl::StrCat("# ok\n", bad, "\n"), "f");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("f line 2")) << bad;
  }
  EXPECT_FALSE(ParseTokens(absl::StrCat("a sha256:", digest, "\nb sha256:", digest), "f").ok())
      << "one token listed for two identities";
}

TEST(AuthorizationPartsTest, AServerDoesNotStartWithATokensFileItCannotRead) {
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(
      R"pb(auth {
             tokens_file: "/nonexistent/tokens"
             grants { identity: "x" namespaces: "*" roles: "claim" }
           })pb",
      nullptr);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(server.status().message()),
              ::testing::HasSubstr("auth.tokens_file: cannot read '/nonexistent/tokens'"));
}

TEST(AuthorizationPartsTest, WithoutGrantsEveryCallerMayDoEverything) {
  absl::StatusOr<std::unique_ptr<Authorizer>> auth = Authorizer::Create(AuthSettings());
  ASSERT_TRUE(auth.ok());
  EXPECT_FALSE((*auth)->enabled());
  EXPECT_TRUE((*auth)->Authorize(Caller(), "any", Role::kScan).ok());
  EXPECT_TRUE((*auth)->Authorize(Caller(), "*", Role::kCluster).ok());
}

TEST(AuthorizationPartsTest, AGrantCoversOnlyItsRolesAndNamespaces) {
  AuthSettings settings;
  Grant claim_a{"id-a", {"payments", "refunds"}};
  claim_a.claim = true;
  Grant scan_a{"id-a", {"*"}};
  scan_a.scan = true;
  Grant claim_b{"id-b", {"refunds"}};
  claim_b.claim = true;
  Grant read_c{"id-c", {"payments"}};
  read_c.read = true;
  settings.grants = {claim_a, scan_a, claim_b, read_c};
  absl::StatusOr<std::unique_ptr<Authorizer>> auth = Authorizer::Create(settings);
  ASSERT_TRUE(auth.ok());
  const Authorizer& a = **auth;
  EXPECT_TRUE(a.Authorize(Caller{"id-a", "", "id-a"}, "payments", Role::kClaim).ok());
  EXPECT_TRUE(a.Authorize(Caller{"id-a", "", "id-a"}, "refunds", Role::kClaim).ok());
  EXPECT_FALSE(a.Authorize(Caller{"id-a", "", "id-a"}, "orders", Role::kClaim).ok());
  EXPECT_TRUE(a.Authorize(Caller{"id-a", "", "id-a"}, "orders", Role::kScan).ok());
  EXPECT_FALSE(a.Authorize(Caller{"id-a", "", "id-a"}, "*", Role::kCluster).ok());
  EXPECT_FALSE(a.Authorize(Caller{"id-b", "", "id-b"}, "payments", Role::kClaim).ok());
  EXPECT_FALSE(a.Authorize(Caller{"id-b", "", "id-b"}, "refunds", Role::kScan).ok());
  // A claim grant reads too; a read grant only reads.
  EXPECT_TRUE(a.Authorize(Caller{"id-b", "", "id-b"}, "refunds", Role::kRead).ok());
  EXPECT_TRUE(a.Authorize(Caller{"id-c", "", "id-c"}, "payments", Role::kRead).ok());
  EXPECT_FALSE(a.Authorize(Caller{"id-c", "", "id-c"}, "payments", Role::kClaim).ok());
  EXPECT_FALSE(a.Authorize(Caller{"id-c", "", "id-c"}, "refunds", Role::kRead).ok());
  EXPECT_TRUE(a.AuthorizeAny(Caller{"id-b", "", "id-b"}).ok());
  EXPECT_FALSE(a.AuthorizeAny(Caller{"id-d", "", "id-d"}).ok());
}

}  // namespace
}  // namespace dedup::server::test
