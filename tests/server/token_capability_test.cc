// Tokens are capabilities (design.md §10): whoever holds a live claim's
// token can Complete, Release or Extend it, so no answer shows that token to
// a caller other than the holder: not Claim, Query, Batch, Stream or Scan.

#include <memory>
#include <vector>

#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

constexpr char kNs[] = "payments";
constexpr char kKey[] = "pay-1";

class TokenCapabilityTest : public ServerTest {
 protected:
  // Worker A holds kKey with fingerprint "a".
  void SetUp() override {
    ServerTest::SetUp();
    v1::ClaimRequest claim = ClaimOf(kNs, kKey, "worker-a", 10'000);
    claim.set_fingerprint("a");
    const v1::ClaimResponse held = Claim(claim);
    ASSERT_EQ(held.outcome(), v1::ClaimResponse::ACQUIRED);
    token_a_ = held.token();
    ASSERT_GT(token_a_, 0u);
  }

  // Every answer worker B can get about kKey, as records or claim answers.
  std::vector<uint64_t> TokensShownToB() {
    std::vector<uint64_t> shown;
    shown.push_back(Claim(ClaimOf(kNs, kKey, "worker-b")).token());
    v1::ClaimRequest other_payload = ClaimOf(kNs, kKey, "worker-b");
    other_payload.set_fingerprint("b");
    shown.push_back(Claim(other_payload).token());
    shown.push_back(Query(QueryOf(kNs, kKey)).record().token());
    for (const v1::Record& record : Scan(ScanOf(kNs))) shown.push_back(record.token());
    v1::ScanRequest in_progress = ScanOf(kNs);
    in_progress.set_state(v1::STATE_IN_PROGRESS);
    for (const v1::Record& record : Scan(in_progress)) shown.push_back(record.token());

    v1::BatchRequest batch;
    *batch.add_operations() = Op(ClaimOf(kNs, kKey, "worker-b"));
    *batch.add_operations() = Op(other_payload);
    *batch.add_operations() = Op(QueryOf(kNs, kKey));
    const v1::BatchResponse answered = Batch(batch);
    for (const v1::OperationResult& result : answered.results()) {
      shown.push_back(result.has_query() ? result.query().record().token()
                                         : result.claim().token());
    }

    std::unique_ptr<grpc::ClientContext> context = NewContext();
    auto stream = stub().Stream(context.get());
    EXPECT_TRUE(stream->Write(batch));
    stream->WritesDone();
    v1::BatchResponse streamed;
    while (stream->Read(&streamed)) {
      for (const v1::OperationResult& result : streamed.results()) {
        shown.push_back(result.has_query() ? result.query().record().token()
                                           : result.claim().token());
      }
    }
    EXPECT_THAT(stream->Finish(), IsOk());
    return shown;
  }

  uint64_t token_a_ = 0;
};

TEST_F(TokenCapabilityTest, NoAnswerShowsALiveClaimsTokenToAnotherCaller) {
  const std::vector<uint64_t> shown = TokensShownToB();

  EXPECT_EQ(shown.size(), 11u) << "every path was read";
  EXPECT_THAT(shown, ::testing::Each(0u));
  EXPECT_EQ(Claim(ClaimOf(kNs, kKey, "worker-b")).holder(), "worker-a")
      << "the holder and its lease are still shown";
}

TEST_F(TokenCapabilityTest, ALapsedLeaseStillWithholdsTheTokenThatCanComplete) {
  clock_.AdvanceMs(10'000);
  ASSERT_EQ(Query(QueryOf(kNs, kKey)).record().state(), v1::STATE_ABSENT);

  EXPECT_EQ(Query(QueryOf(kNs, kKey)).record().token(), 0u);
  // Why: nobody claimed since, so the newest token still completes the key.
  EXPECT_EQ(Complete(CompleteOf(kNs, kKey, token_a_, "late")).outcome(), v1::CompleteResponse::OK);
}

TEST_F(TokenCapabilityTest, TheHolderGetsItsTokenBackAndItIsShownOnceItGrantsNothing) {
  EXPECT_EQ(Claim(ClaimOf(kNs, kKey, "worker-a")).token(), token_a_)
      << "a re-entrant Claim is how a holder recovers a lost answer";
  ASSERT_EQ(Complete(CompleteOf(kNs, kKey, token_a_, "charged")).outcome(),
            v1::CompleteResponse::OK);

  EXPECT_EQ(Query(QueryOf(kNs, kKey)).record().token(), token_a_);
  EXPECT_EQ(Claim(ClaimOf(kNs, kKey, "worker-b")).token(), token_a_);
}

}  // namespace
}  // namespace dedup::server::test
