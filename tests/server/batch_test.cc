// Batch: many operations in one call, each answered in order and on its own
// (design.md §4).

#include "absl/strings/str_cat.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using ::testing::StartsWith;

constexpr char kNs[] = "orders";

using BatchTest = ServerTest;

TEST_F(BatchTest, EachOperationIsAnsweredInOrderByKind) {
  const uint64_t held = MustAcquire(kNs, "held", "worker-a");
  v1::BatchRequest request;
  request.set_batch_id(77);
  *request.add_operations() = Op(ClaimOf(kNs, "new", "worker-b"));
  *request.add_operations() = Op(ClaimOf(kNs, "held", "worker-b"));
  *request.add_operations() = Op(ExtendOf(kNs, "held", held));
  *request.add_operations() = Op(QueryOf(kNs, "held"));
  *request.add_operations() = Op(CompleteOf(kNs, "held", held, "done"));
  *request.add_operations() = Op(ReleaseOf(kNs, "unknown", 5));

  const v1::BatchResponse response = Batch(request);

  EXPECT_EQ(response.batch_id(), 77u);
  ASSERT_EQ(response.results_size(), 6);
  ASSERT_TRUE(response.results(0).has_claim());
  EXPECT_EQ(response.results(0).claim().outcome(), v1::ClaimResponse::ACQUIRED);
  ASSERT_TRUE(response.results(1).has_claim());
  EXPECT_EQ(response.results(1).claim().outcome(), v1::ClaimResponse::IN_PROGRESS);
  EXPECT_EQ(response.results(1).claim().holder(), "worker-a");
  ASSERT_TRUE(response.results(2).has_extend());
  EXPECT_EQ(response.results(2).extend().outcome(), v1::ExtendResponse::OK);
  ASSERT_TRUE(response.results(3).has_query());
  EXPECT_EQ(response.results(3).query().record().state(), v1::STATE_IN_PROGRESS);
  ASSERT_TRUE(response.results(4).has_complete());
  EXPECT_EQ(response.results(4).complete().outcome(), v1::CompleteResponse::OK);
  ASSERT_TRUE(response.results(5).has_release());
  EXPECT_EQ(response.results(5).release().outcome(), v1::ReleaseResponse::NOT_FOUND);
}

TEST_F(BatchTest, BadItemGetsItsOwnErrorAndTheOthersStillRun) {
  v1::BatchRequest request;
  *request.add_operations() = Op(ClaimOf(kNs, "first", "worker-a"));
  *request.add_operations() = Op(ClaimOf(kNs, "", "worker-a"));
  *request.add_operations() = Op(ClaimOf(kNs, "third", "worker-a"));

  const v1::BatchResponse response = Batch(request);

  ASSERT_EQ(response.results_size(), 3);
  EXPECT_EQ(response.results(0).claim().outcome(), v1::ClaimResponse::ACQUIRED);
  ASSERT_TRUE(response.results(1).has_error());
  EXPECT_EQ(response.results(1).error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(response.results(1).error().message(), StartsWith("key"));
  EXPECT_EQ(response.results(2).claim().outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(Query(QueryOf(kNs, "third")).record().state(), v1::STATE_IN_PROGRESS);
}

TEST_F(BatchTest, ClaimAndCompleteOfOneKeyTakeEffectInTheOrderGiven) {
  const uint64_t token = MustAcquire(kNs, "order-1", "worker-a");
  v1::BatchRequest request;
  *request.add_operations() = Op(ClaimOf(kNs, "order-1", "worker-b"));
  *request.add_operations() = Op(ClaimOf(kNs, "order-1", "worker-a"));
  *request.add_operations() = Op(CompleteOf(kNs, "order-1", token, "shipped"));
  *request.add_operations() = Op(ClaimOf(kNs, "order-1", "worker-b"));

  const v1::BatchResponse response = Batch(request);

  ASSERT_EQ(response.results_size(), 4);
  EXPECT_EQ(response.results(0).claim().outcome(), v1::ClaimResponse::IN_PROGRESS);
  EXPECT_EQ(response.results(1).claim().outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_EQ(response.results(1).claim().token(), token);
  EXPECT_EQ(response.results(2).complete().outcome(), v1::CompleteResponse::OK);
  EXPECT_EQ(response.results(3).claim().outcome(), v1::ClaimResponse::COMPLETED);
  EXPECT_EQ(response.results(3).claim().result(), "shipped");
}

TEST_F(BatchTest, ClaimThenReleaseThenClaimInOneBatchHandsTheKeyOn) {
  v1::BatchRequest first;
  *first.add_operations() = Op(ClaimOf(kNs, "order-1", "worker-a"));
  const uint64_t token = Batch(first).results(0).claim().token();
  v1::BatchRequest request;
  *request.add_operations() = Op(ReleaseOf(kNs, "order-1", token));
  *request.add_operations() = Op(ClaimOf(kNs, "order-1", "worker-b"));
  *request.add_operations() = Op(CompleteOf(kNs, "order-1", token, "too-late"));

  const v1::BatchResponse response = Batch(request);

  ASSERT_EQ(response.results_size(), 3);
  EXPECT_EQ(response.results(0).release().outcome(), v1::ReleaseResponse::OK);
  EXPECT_EQ(response.results(1).claim().outcome(), v1::ClaimResponse::ACQUIRED);
  EXPECT_GT(response.results(1).claim().token(), token);
  EXPECT_EQ(response.results(2).complete().outcome(), v1::CompleteResponse::STALE_TOKEN);
}

TEST_F(BatchTest, DuplicateClaimsOfOneKeyInOneBatchAcquireOnce) {
  v1::BatchRequest request;
  for (int i = 0; i < 5; ++i) {
    *request.add_operations() = Op(ClaimOf(kNs, "order-1", absl::StrCat("worker-", i)));
  }

  const v1::BatchResponse response = Batch(request);

  ASSERT_EQ(response.results_size(), 5);
  EXPECT_EQ(response.results(0).claim().outcome(), v1::ClaimResponse::ACQUIRED);
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(response.results(i).claim().outcome(), v1::ClaimResponse::IN_PROGRESS)
        << "item " << i;
    EXPECT_EQ(response.results(i).claim().holder(), "worker-0") << "item " << i;
  }
}

TEST_F(BatchTest, EmptyBatchIsAnsweredWithNoResults) {
  v1::BatchRequest request;
  request.set_batch_id(9);

  const v1::BatchResponse response = Batch(request);

  EXPECT_EQ(response.batch_id(), 9u);
  EXPECT_EQ(response.results_size(), 0);
}

TEST_F(BatchTest, ThousandOperationsAreAccepted) {
  v1::BatchRequest request;
  for (int i = 0; i < kMaxBatchOperations; ++i) {
    *request.add_operations() = Op(QueryOf(kNs, absl::StrCat("key-", i)));
  }

  const v1::BatchResponse response = Batch(request);

  ASSERT_EQ(response.results_size(), kMaxBatchOperations);
  EXPECT_EQ(response.results(kMaxBatchOperations - 1).query().record().key(), "key-999");
}

}  // namespace
}  // namespace dedup::server::test
