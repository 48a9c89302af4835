// Namespaces carry their own policy; a strict server serves only the
// namespaces it declares (design.md §2, §4).

#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using ::testing::HasSubstr;

class NamespacePolicyTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      default_policy { lease_default: "20s" max_result_bytes: 8 }
      namespaces {
        name: "payments"
        policy {
          lease_default: "45s"
          lease_max: "2m"
          retention_default: "48h"
          retention_floor: "30m"
        }
      }
    )pb";
  }
};

TEST_F(NamespacePolicyTest, DeclaredLeaseDefaultSetsTheLeaseExpiry) {
  clock_.AdvanceMs(10);

  EXPECT_EQ(Claim(ClaimOf("payments", "pay-1", "worker-a")).lease_expires_ms(),
            kStartMs + 10 + 45'000);
}

TEST_F(NamespacePolicyTest, UndeclaredNamespaceUsesTheConfiguredDefaultPolicy) {
  EXPECT_EQ(Claim(ClaimOf("coupons", "coupon-1", "worker-a")).lease_expires_ms(),
            kStartMs + 20'000);
}

TEST_F(NamespacePolicyTest, DeclaredRetentionDefaultSetsTheRetentionExpiry) {
  const uint64_t token = MustAcquire("payments", "pay-1", "worker-a");

  EXPECT_EQ(Complete(CompleteOf("payments", "pay-1", token, "ok")).retention_expires_ms(),
            kStartMs + 48 * 3600'000LL);
}

TEST_F(NamespacePolicyTest, DeclaredLeaseMaxBoundsOnlyItsNamespace) {
  EXPECT_THAT(StatusOf(stub(), ClaimOf("payments", "pay-1", "worker-a", 120'001)),
              IsInvalidArgumentNaming("lease_ms"));
  EXPECT_EQ(Claim(ClaimOf("coupons", "coupon-1", "worker-a", 120'001)).outcome(),
            v1::ClaimResponse::ACQUIRED);
}

TEST_F(NamespacePolicyTest, DeclaredRetentionFloorBoundsOnlyItsNamespace) {
  const uint64_t pay = MustAcquire("payments", "pay-1", "worker-a");
  const uint64_t coupon = MustAcquire("coupons", "coupon-1", "worker-a");
  v1::CompleteRequest short_payment = CompleteOf("payments", "pay-1", pay, "ok");
  short_payment.set_retention_ms(30 * 60'000);
  v1::CompleteRequest short_coupon = CompleteOf("coupons", "coupon-1", coupon, "ok");
  short_coupon.set_retention_ms(30 * 60'000);

  EXPECT_EQ(Complete(short_payment).outcome(), v1::CompleteResponse::OK);
  EXPECT_THAT(StatusOf(stub(), short_coupon), IsInvalidArgumentNaming("retention_ms"));
}

TEST_F(NamespacePolicyTest, FieldsADeclaredNamespaceLeavesUnsetComeFromTheDefaultPolicy) {
  const uint64_t token = MustAcquire("payments", "pay-1", "worker-a");

  EXPECT_THAT(StatusOf(stub(), CompleteOf("payments", "pay-1", token, "123456789")),
              IsInvalidArgumentNaming("result"));
  EXPECT_EQ(Complete(CompleteOf("payments", "pay-1", token, "12345678")).outcome(),
            v1::CompleteResponse::OK);
}

class StrictNamespaceTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      strict_namespaces: true
      namespaces {
        name: "payments"
        policy { lease_default: "45s" }
      }
    )pb";
  }
};

TEST_F(StrictNamespaceTest, UndeclaredNamespaceIsNotFound) {
  const grpc::Status status = StatusOf(stub(), ClaimOf("coupons", "coupon-1", "worker-a"));

  EXPECT_THAT(status, IsErrorNaming(grpc::StatusCode::NOT_FOUND, "namespace"));
  EXPECT_THAT(status.error_message(), HasSubstr("coupons"));
}

TEST_F(StrictNamespaceTest, DeclaredNamespaceIsServedWithItsPolicy) {
  const v1::ClaimResponse claim = Claim(ClaimOf("payments", "pay-1", "worker-a"));

  EXPECT_EQ(claim.outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(claim.lease_expires_ms(), kStartMs + 45'000);
}

TEST_F(StrictNamespaceTest, EveryCallRefusesAnUndeclaredNamespace) {
  const auto not_found = IsErrorNaming(grpc::StatusCode::NOT_FOUND, "namespace");
  EXPECT_THAT(StatusOf(stub(), CompleteOf("coupons", "c", 1, "r")), not_found);
  EXPECT_THAT(StatusOf(stub(), ReleaseOf("coupons", "c", 1)), not_found);
  EXPECT_THAT(StatusOf(stub(), ExtendOf("coupons", "c", 1)), not_found);
  EXPECT_THAT(StatusOf(stub(), QueryOf("coupons", "c")), not_found);
  grpc::Status scan;
  ScanAll(stub(), ScanOf("coupons"), &scan);
  EXPECT_THAT(scan, not_found);
}

TEST_F(StrictNamespaceTest, BatchItemInAnUndeclaredNamespaceGetsNotFoundAlone) {
  v1::BatchRequest request;
  *request.add_operations() = Op(ClaimOf("coupons", "coupon-1", "worker-a"));
  *request.add_operations() = Op(ClaimOf("payments", "pay-1", "worker-a"));

  const v1::BatchResponse response = Batch(request);

  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).error().code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(response.results(1).claim().outcome(), v1::ClaimResponse::ACQUIRED);
}

TEST_F(StrictNamespaceTest, MalformedNamespaceIsStillInvalidArgument) {
  EXPECT_THAT(StatusOf(stub(), ClaimOf("Payments", "pay-1", "worker-a")),
              IsInvalidArgumentNaming("namespace"));
}

}  // namespace
}  // namespace dedup::server::test
