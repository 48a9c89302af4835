// Bad input is the caller's: INVALID_ARGUMENT with a message that starts
// with the offending field and states its bound, and nothing is changed
// (docs/design.md §4).

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kNs[] = "orders";
// Declared with tight bounds: lease_max 1m, retention_floor 2h,
// max_result_bytes 16.
constexpr char kTightNs[] = "tight";
constexpr uint64_t kTightLeaseMaxMs = 60'000;
constexpr uint64_t kTightRetentionFloorMs = 2 * 3600'000;
constexpr size_t kTightMaxResultBytes = 16;

class ValidationTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      namespaces {
        name: "tight"
        policy {
          lease_default: "10s"
          lease_max: "1m"
          retention_default: "3h"
          retention_floor: "2h"
          max_result_bytes: 16
        }
      }
    )pb";
  }

  grpc::Status StatusOf(const v1::ClaimRequest& r) { return test::StatusOf(stub(), r); }
  grpc::Status StatusOf(const v1::CompleteRequest& r) { return test::StatusOf(stub(), r); }
  grpc::Status StatusOf(const v1::ReleaseRequest& r) { return test::StatusOf(stub(), r); }
  grpc::Status StatusOf(const v1::ExtendRequest& r) { return test::StatusOf(stub(), r); }
  grpc::Status StatusOf(const v1::QueryRequest& r) { return test::StatusOf(stub(), r); }
  grpc::Status StatusOf(const v1::BatchRequest& r) { return test::StatusOf(stub(), r); }

  v1::RecordState StateOf(const std::string& ns, const std::string& key) {
    return Query(QueryOf(ns, key)).record().state();
  }
};

// Keys.

TEST_F(ValidationTest, EmptyKeyIsRejectedNamingKey) {
  const grpc::Status status = StatusOf(ClaimOf(kNs, "", "worker-a"));

  EXPECT_THAT(status, IsInvalidArgumentNaming("key"));
  EXPECT_THAT(status.error_message(), HasSubstr("1..512"));
}

TEST_F(ValidationTest, KeyOver512BytesIsRejectedAndNotStored) {
  const std::string key(513, 'k');

  const grpc::Status status = StatusOf(ClaimOf(kNs, key, "worker-a"));

  EXPECT_THAT(status, IsInvalidArgumentNaming("key"));
  EXPECT_THAT(status.error_message(), HasSubstr("512"));
  EXPECT_THAT(Scan(ScanOf(kNs)), ::testing::SizeIs(0));
}

TEST_F(ValidationTest, KeyOfExactly512BytesIsAccepted) {
  EXPECT_EQ(Claim(ClaimOf(kNs, std::string(512, 'k'), "worker-a")).outcome(),
            v1::ClaimResponse::ACQUIRED);
}

TEST_F(ValidationTest, EveryKeyedCallChecksTheKey) {
  EXPECT_THAT(StatusOf(CompleteOf(kNs, "", 1, "r")), IsInvalidArgumentNaming("key"));
  EXPECT_THAT(StatusOf(ReleaseOf(kNs, "", 1)), IsInvalidArgumentNaming("key"));
  EXPECT_THAT(StatusOf(ExtendOf(kNs, "", 1)), IsInvalidArgumentNaming("key"));
  EXPECT_THAT(StatusOf(QueryOf(kNs, "")), IsInvalidArgumentNaming("key"));
}

// Owners.

TEST_F(ValidationTest, EmptyOwnerIsRejectedNamingOwner) {
  EXPECT_THAT(StatusOf(ClaimOf(kNs, "order-1", "")), IsInvalidArgumentNaming("owner"));
  EXPECT_EQ(StateOf(kNs, "order-1"), v1::STATE_ABSENT);
}

TEST_F(ValidationTest, OwnerOver256BytesIsRejectedNamingOwner) {
  const grpc::Status status = StatusOf(ClaimOf(kNs, "order-1", std::string(257, 'o')));

  EXPECT_THAT(status, IsInvalidArgumentNaming("owner"));
  EXPECT_THAT(status.error_message(), HasSubstr("256"));
}

// Fingerprints.

TEST_F(ValidationTest, FingerprintOver256BytesIsRejectedNamingFingerprint) {
  v1::ClaimRequest request = ClaimOf(kNs, "order-1", "worker-a");
  request.set_fingerprint(std::string(257, 'f'));

  EXPECT_THAT(StatusOf(request), IsInvalidArgumentNaming("fingerprint"));
  EXPECT_EQ(StateOf(kNs, "order-1"), v1::STATE_ABSENT);
}

// Namespaces.

TEST_F(ValidationTest, UppercaseNamespaceIsRejectedNamingNamespace) {
  EXPECT_THAT(StatusOf(ClaimOf("Orders", "order-1", "worker-a")),
              IsInvalidArgumentNaming("namespace"));
}

TEST_F(ValidationTest, EmptyNamespaceIsRejectedNamingNamespace) {
  const grpc::Status status = StatusOf(ClaimOf("", "order-1", "worker-a"));

  EXPECT_THAT(status, IsInvalidArgumentNaming("namespace"));
  EXPECT_THAT(status.error_message(), HasSubstr("1..64"));
}

TEST_F(ValidationTest, NamespaceOf65CharactersIsRejectedAnd64Accepted) {
  EXPECT_THAT(StatusOf(ClaimOf(std::string(65, 'n'), "order-1", "worker-a")),
              IsInvalidArgumentNaming("namespace"));
  EXPECT_EQ(Claim(ClaimOf(std::string(64, 'n'), "order-1", "worker-a")).outcome(),
            v1::ClaimResponse::ACQUIRED);
}

TEST_F(ValidationTest, NamespaceStartingWithPunctuationIsRejected) {
  EXPECT_THAT(StatusOf(ClaimOf("-orders", "order-1", "worker-a")),
              IsInvalidArgumentNaming("namespace"));
  EXPECT_THAT(StatusOf(ClaimOf("orders/eu", "order-1", "worker-a")),
              IsInvalidArgumentNaming("namespace"));
}

TEST_F(ValidationTest, ScanChecksTheNamespace) {
  grpc::Status status;
  ScanAll(stub(), ScanOf("Ledger"), &status);

  EXPECT_THAT(status, IsInvalidArgumentNaming("namespace"));
}

// Leases.

TEST_F(ValidationTest, LeaseOfZeroIsRejectedNotTreatedAsUnset) {
  const grpc::Status status = StatusOf(ClaimOf(kNs, "order-1", "worker-a", 0));

  EXPECT_THAT(status, IsInvalidArgumentNaming("lease_ms"));
  EXPECT_EQ(StateOf(kNs, "order-1"), v1::STATE_ABSENT);
}

TEST_F(ValidationTest, LeaseAboveTheNamespaceMaximumIsRejectedNamingTheBound) {
  const grpc::Status status =
      StatusOf(ClaimOf(kTightNs, "order-1", "worker-a", kTightLeaseMaxMs + 1));

  EXPECT_THAT(status, IsInvalidArgumentNaming("lease_ms"));
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat(kTightLeaseMaxMs)));
  EXPECT_EQ(StateOf(kTightNs, "order-1"), v1::STATE_ABSENT);
}

TEST_F(ValidationTest, LeaseOfExactlyTheMaximumIsAccepted) {
  EXPECT_EQ(Claim(ClaimOf(kTightNs, "order-1", "worker-a", kTightLeaseMaxMs)).outcome(),
            v1::ClaimResponse::ACQUIRED);
}

TEST_F(ValidationTest, ExtendChecksTheLeaseToo) {
  const uint64_t token = MustAcquire(kTightNs, "order-1", "worker-a");
  v1::ExtendRequest zero = ExtendOf(kTightNs, "order-1", token);
  zero.set_lease_ms(0);
  v1::ExtendRequest too_long = ExtendOf(kTightNs, "order-1", token);
  too_long.set_lease_ms(kTightLeaseMaxMs + 1);

  EXPECT_THAT(StatusOf(zero), IsInvalidArgumentNaming("lease_ms"));
  EXPECT_THAT(StatusOf(too_long), IsInvalidArgumentNaming("lease_ms"));
}

// Completion.

TEST_F(ValidationTest, RetentionBelowTheNamespaceFloorIsRejectedAndTheClaimStays) {
  const uint64_t token = MustAcquire(kTightNs, "order-1", "worker-a");
  v1::CompleteRequest request = CompleteOf(kTightNs, "order-1", token, "r");
  request.set_retention_ms(kTightRetentionFloorMs - 1);

  const grpc::Status status = StatusOf(request);

  EXPECT_THAT(status, IsInvalidArgumentNaming("retention_ms"));
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat(kTightRetentionFloorMs)));
  EXPECT_EQ(StateOf(kTightNs, "order-1"), v1::STATE_IN_PROGRESS);
}

TEST_F(ValidationTest, RetentionOfExactlyTheFloorIsAccepted) {
  const uint64_t token = MustAcquire(kTightNs, "order-1", "worker-a");
  v1::CompleteRequest request = CompleteOf(kTightNs, "order-1", token, "r");
  request.set_retention_ms(kTightRetentionFloorMs);

  EXPECT_EQ(Complete(request).outcome(), v1::CompleteResponse::OK);
}

TEST_F(ValidationTest, RetentionAboveTenYearsIsRejected) {
  const uint64_t token = MustAcquire(kNs, "order-1", "worker-a");
  v1::CompleteRequest request = CompleteOf(kNs, "order-1", token, "r");
  request.set_retention_ms(kMaxRetentionMs + 1);

  EXPECT_THAT(StatusOf(request), IsInvalidArgumentNaming("retention_ms"));
}

TEST_F(ValidationTest, ResultAboveTheNamespaceLimitIsRejectedAndTheClaimStays) {
  const uint64_t token = MustAcquire(kTightNs, "order-1", "worker-a");

  const grpc::Status status =
      StatusOf(CompleteOf(kTightNs, "order-1", token, std::string(kTightMaxResultBytes + 1, 'r')));

  EXPECT_THAT(status, IsInvalidArgumentNaming("result"));
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat(kTightMaxResultBytes)));
  EXPECT_EQ(StateOf(kTightNs, "order-1"), v1::STATE_IN_PROGRESS);
}

TEST_F(ValidationTest, ResultOfExactlyTheLimitIsAccepted) {
  const uint64_t token = MustAcquire(kTightNs, "order-1", "worker-a");

  EXPECT_EQ(Complete(CompleteOf(kTightNs, "order-1", token, std::string(kTightMaxResultBytes, 'r')))
                .outcome(),
            v1::CompleteResponse::OK);
}

TEST_F(ValidationTest, DefaultResultLimitIs64KiB) {
  const uint64_t token = MustAcquire(kNs, "order-1", "worker-a");

  EXPECT_THAT(StatusOf(CompleteOf(kNs, "order-1", token, std::string(64 * 1024 + 1, 'r'))),
              IsInvalidArgumentNaming("result"));
  EXPECT_EQ(Complete(CompleteOf(kNs, "order-1", token, std::string(64 * 1024, 'r'))).outcome(),
            v1::CompleteResponse::OK);
}

// Tokens.

TEST_F(ValidationTest, TokenZeroIsRejectedByEveryTokenedCall) {
  MustAcquire(kNs, "order-1", "worker-a");

  EXPECT_THAT(StatusOf(CompleteOf(kNs, "order-1", 0, "r")), IsInvalidArgumentNaming("token"));
  EXPECT_THAT(StatusOf(ReleaseOf(kNs, "order-1", 0)), IsInvalidArgumentNaming("token"));
  EXPECT_THAT(StatusOf(ExtendOf(kNs, "order-1", 0)), IsInvalidArgumentNaming("token"));
  EXPECT_EQ(StateOf(kNs, "order-1"), v1::STATE_IN_PROGRESS);
}

// Batches.

TEST_F(ValidationTest, EmptyBatchOperationGetsItsOwnInvalidArgument) {
  v1::BatchRequest request;
  request.add_operations();  // No op set.
  *request.add_operations() = Op(ClaimOf(kNs, "order-1", "worker-a"));

  const v1::BatchResponse response = Batch(request);

  ASSERT_EQ(response.results_size(), 2);
  ASSERT_TRUE(response.results(0).has_error());
  EXPECT_EQ(response.results(0).error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(response.results(0).error().message(), StartsWith("op"));
  EXPECT_EQ(response.results(1).claim().outcome(), v1::ClaimResponse::ACQUIRED);
}

TEST_F(ValidationTest, BatchItemErrorsNameTheirField) {
  v1::BatchRequest request;
  *request.add_operations() = Op(ClaimOf("BAD", "order-1", "worker-a"));
  *request.add_operations() = Op(ClaimOf(kNs, "order-1", "worker-a", 0));
  *request.add_operations() = Op(ReleaseOf(kNs, "order-1", 0));

  const v1::BatchResponse response = Batch(request);

  ASSERT_EQ(response.results_size(), 3);
  for (const v1::OperationResult& result : response.results()) {
    EXPECT_EQ(result.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_THAT(response.results(0).error().message(), StartsWith("namespace"));
  EXPECT_THAT(response.results(1).error().message(), StartsWith("lease_ms"));
  EXPECT_THAT(response.results(2).error().message(), StartsWith("token"));
}

TEST_F(ValidationTest, BatchOfMoreThan1000OperationsIsRejectedWhole) {
  v1::BatchRequest request;
  for (int i = 0; i <= kMaxBatchOperations; ++i) {
    *request.add_operations() = Op(ClaimOf(kNs, absl::StrCat("order-", i), "worker-a"));
  }

  const grpc::Status status = StatusOf(request);

  EXPECT_THAT(status, IsInvalidArgumentNaming("operations"));
  EXPECT_THAT(status.error_message(), HasSubstr("1000"));
  EXPECT_EQ(StateOf(kNs, "order-0"), v1::STATE_ABSENT) << "nothing of it ran";
}

// Scans.

TEST_F(ValidationTest, ScanForStateAbsentIsRejectedNamingState) {
  v1::ScanRequest request = ScanOf(kNs);
  request.set_state(v1::STATE_ABSENT);
  grpc::Status status;

  ScanAll(stub(), request, &status);

  EXPECT_THAT(status, IsInvalidArgumentNaming("state"));
}

class ShortKeyValidationTest : public ServerTest {
 protected:
  std::string Config() const override { return R"pb(durability: "buffered" max_key_bytes: 8)pb"; }
};

TEST_F(ShortKeyValidationTest, ConfiguredMaxKeyBytesBoundsKeys) {
  const grpc::Status status = StatusOf(stub(), ClaimOf(kNs, "123456789", "worker-a"));

  EXPECT_THAT(status, IsInvalidArgumentNaming("key"));
  EXPECT_THAT(status.error_message(), HasSubstr("1..8"));
  EXPECT_EQ(Claim(ClaimOf(kNs, "12345678", "worker-a")).outcome(), v1::ClaimResponse::ACQUIRED);
}

}  // namespace
}  // namespace dedup::server::test
