// Scan: the admin stream of a namespace's live records, filtered by state
// and age, for reconciliation jobs (design.md §4).

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::Property;
using ::testing::SizeIs;

constexpr char kNs[] = "ledger";

class ScanTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      namespaces {
        name: "ledger"
        policy { max_attempts: 2 }
      }
    )pb";
  }

  // One record of every live state in kNs, an expired lease, and records of
  // neighbouring namespaces whose names share a prefix with kNs.
  void FillEveryState() {
    Claim(ClaimOf(kNs, "expired", "worker-a", 1000));
    MustAcquire(kNs, "active-1", "worker-a");
    MustAcquire(kNs, "active-2", "worker-b");
    Complete(CompleteOf(kNs, "done", MustAcquire(kNs, "done", "worker-a"), "ok"));
    Release(ReleaseOf(kNs, "released", MustAcquire(kNs, "released", "worker-a")));
    Release(ReleaseOf(kNs, "poisoned", MustAcquire(kNs, "poisoned", "worker-a")));
    Release(ReleaseOf(kNs, "poisoned", MustAcquire(kNs, "poisoned", "worker-b")));
    MustAcquire("ledger-eu", "active-eu", "worker-a");
    MustAcquire("ledge", "active-short", "worker-a");
    clock_.AdvanceMs(1000);
  }

  // Claims key-000 .. key-<n-1> in kNs in one batch.
  void ClaimMany(int n) {
    v1::BatchRequest request;
    for (int i = 0; i < n; ++i) {
      *request.add_operations() =
          Op(ClaimOf(kNs, absl::StrCat("key-", absl::Dec(i, absl::kZeroPad3)), "worker-a"));
    }
    const v1::BatchResponse response = Batch(request);
    ASSERT_EQ(response.results_size(), n);
    for (const v1::OperationResult& result : response.results()) {
      ASSERT_EQ(result.claim().outcome(), v1::ClaimResponse::ACQUIRED);
    }
  }

  static v1::ScanRequest ScanOfState(v1::RecordState state) {
    v1::ScanRequest request = ScanOf(kNs);
    request.set_state(state);
    return request;
  }
};

TEST_F(ScanTest, WithoutAStateFilterEveryLiveRecordOfTheNamespaceArrives) {
  FillEveryState();

  EXPECT_THAT(KeysOf(Scan(ScanOf(kNs))),
              ElementsAre("active-1", "active-2", "done", "poisoned", "released"));
}

TEST_F(ScanTest, StateFilterKeepsOnlyThatState) {
  FillEveryState();

  EXPECT_THAT(KeysOf(Scan(ScanOfState(v1::STATE_IN_PROGRESS))),
              ElementsAre("active-1", "active-2"));
  EXPECT_THAT(KeysOf(Scan(ScanOfState(v1::STATE_COMPLETED))), ElementsAre("done"));
  EXPECT_THAT(KeysOf(Scan(ScanOfState(v1::STATE_RELEASED))), ElementsAre("released"));
  EXPECT_THAT(KeysOf(Scan(ScanOfState(v1::STATE_FAILED))), ElementsAre("poisoned"));
}

TEST_F(ScanTest, RecordsCarryTheirNamespaceAndState) {
  FillEveryState();

  const std::vector<v1::Record> records = Scan(ScanOfState(v1::STATE_COMPLETED));

  ASSERT_THAT(records, SizeIs(1));
  EXPECT_EQ(records[0].namespace_(), kNs);
  EXPECT_EQ(records[0].state(), v1::STATE_COMPLETED);
  EXPECT_EQ(records[0].result(), "ok");
}

TEST_F(ScanTest, OnlyTheAskedNamespaceIsListed) {
  FillEveryState();

  EXPECT_THAT(KeysOf(Scan(ScanOf("ledger-eu"))), ElementsAre("active-eu"));
  EXPECT_THAT(KeysOf(Scan(ScanOf("ledge"))), ElementsAre("active-short"));
  EXPECT_THAT(Scan(ScanOf("empty-namespace")), SizeIs(0));
}

TEST_F(ScanTest, MinAgeKeepsRecordsWhoseStateHasNotChangedForThatLong) {
  MustAcquire(kNs, "stuck", "worker-a");
  clock_.AdvanceMs(20'000);
  MustAcquire(kNs, "fresh", "worker-b");
  clock_.AdvanceMs(1'000);
  v1::ScanRequest request = ScanOfState(v1::STATE_IN_PROGRESS);

  request.set_min_age_ms(21'000);
  EXPECT_THAT(KeysOf(Scan(request)), ElementsAre("stuck"));
  request.set_min_age_ms(21'001);
  EXPECT_THAT(Scan(request), SizeIs(0));
  request.set_min_age_ms(1'000);
  EXPECT_THAT(KeysOf(Scan(request)), ElementsAre("fresh", "stuck"));
}

TEST_F(ScanTest, LimitCapsTheRecordsSent) {
  ClaimMany(10);
  v1::ScanRequest request = ScanOf(kNs);
  request.set_limit(3);

  EXPECT_THAT(Scan(request), SizeIs(3));
}

TEST_F(ScanTest, MoreRecordsThanOnePageAllArriveOnce) {
  ClaimMany(600);

  const std::vector<v1::Record> records = Scan(ScanOf(kNs));

  ASSERT_THAT(records, SizeIs(600));
  const std::vector<std::string> keys = KeysOf(records);
  for (int i = 0; i < 600; ++i) {
    EXPECT_EQ(keys[i], absl::StrCat("key-", absl::Dec(i, absl::kZeroPad3)));
  }
  EXPECT_THAT(records, Each(Property(&v1::Record::state, v1::STATE_IN_PROGRESS)));
}

TEST_F(ScanTest, LimitAboveOnePageIsHonouredAcrossPages) {
  ClaimMany(600);
  v1::ScanRequest request = ScanOf(kNs);
  request.set_limit(300);

  const std::vector<v1::Record> records = Scan(request);

  EXPECT_THAT(records, SizeIs(300));
  const std::vector<std::string> keys = KeysOf(records);
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "a key came twice";
}

TEST_F(ScanTest, ExpiredRecordsAreNotListed) {
  Claim(ClaimOf(kNs, "short", "worker-a", 1000));
  Complete(CompleteOf(kNs, "kept", MustAcquire(kNs, "kept", "worker-a"), "ok"));
  clock_.AdvanceMs(1000);

  EXPECT_THAT(KeysOf(Scan(ScanOf(kNs))), ElementsAre("kept"));
  clock_.AdvanceMs(kDefaultRetentionMs);
  EXPECT_THAT(Scan(ScanOf(kNs)), SizeIs(0));
}

}  // namespace
}  // namespace dedup::server::test
