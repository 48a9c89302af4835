// Fuzzes the Batch handler in process: DedupService::ExecuteBatch, the code
// behind both Batch and every Stream message, from validation through
// storage to the answer. The store is a real Store (RocksDB) on RocksDB's
// in-memory Env (storage/testing/rocksdb_env.h), with a ManualClock that
// the input moves between batches. No gRPC call is involved.
//
// Each input is a sequence of batches over a few namespaces, keys, owners
// and the tokens answered so far, with some invalid items among them.
// Invariants:
// - every Batch answer carries the request's batch_id and one result per
//   item, of the item's own kind;
// - an item has an error result exactly when the translator refuses it;
//   a valid item is never refused by storage here (the in-memory Env does
//   not fail and answers stay far below max_batch_answer_bytes);
// - against a model of each key (design.md §3): at most one live holder;
//   an ACQUIRED token is new and larger than every earlier one of the key,
//   unless it is the holder's re-entrant claim of a live lease; COMPLETED
//   replays the last result completed; Complete, Release and Extend
//   succeed only with the key's newest token while it is held; expiries are
//   now plus the asked-for duration; and no answer shows the token of a
//   claim that is in progress (design.md §10).
//
// For speed, one store serves many inputs: every input works in namespaces
// of its own (a fresh generation number in each name), so no input sees
// another's records, and the store is reopened on a fresh in-memory Env
// every few thousand inputs to bound memory.

#include <fuzzer/FuzzedDataProvider.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/dedup.pb.h"
#include "rocksdb/env.h"
#include "server/dedup_service.h"
#include "server/limits.h"
#include "server/metrics.h"
#include "server/namespace_policy.h"
#include "server/request_translator.h"
#include "server/shard_map.h"
#include "server/worker_pool.h"
#include "storage/clock.h"
#include "storage/store.h"
#include "storage/testing/rocksdb_env.h"

namespace {

namespace server = dedup::server;
namespace storage = dedup::storage;
namespace v1 = dedup::v1;

void Check(bool condition) {
  if (!condition) std::abort();
}

constexpr int kInputsPerStore = 5000;
constexpr int64_t kLeaseDefaultMs = 30'000;
constexpr int64_t kRetentionDefaultMs = 24 * 3600'000LL;

// The service and everything it needs, on an in-memory store.
class Harness {
 public:
  Harness() : clock_(1'700'000'000'000), metrics_({}, 100, "fuzz") {
    char dir_template[] = "/tmp/fuzz_batch.XXXXXX";
    Check(mkdtemp(dir_template) != nullptr);
    dir_ = dir_template;
  }

  // A fresh store every kInputsPerStore inputs; the service over it.
  server::DedupService& Service() {
    if (inputs_++ % kInputsPerStore == 0) Reopen();
    return *service_;
  }

  storage::ManualClock& clock() { return clock_; }
  uint64_t NextGeneration() { return generation_++; }

 private:
  void Reopen() {
    service_.reset();
    store_.reset();
    env_.reset(rocksdb::NewMemEnv(rocksdb::Env::Default()));
    storage::StoreOptions options;
    // Store::Open creates the directory on the real file system; everything
    // RocksDB writes goes to the in-memory Env.
    options.path = dir_;
    options.shards = 4;
    options.clock = &clock_;
    storage::SetRocksDbEnvForTesting(&options, env_);
    absl::StatusOr<std::unique_ptr<storage::Store>> store = storage::Store::Open(options);
    Check(store.ok());
    store_ = std::move(*store);
    std::filesystem::remove(dir_);  // Opening made it; RocksDB never writes there.
    auto policies = std::make_shared<server::PolicyTable>(
        server::Policy{}, absl::flat_hash_map<std::string, server::Policy>{}, false);
    auto shards =
        std::make_shared<server::ShardMap>(store_->shard_count(), std::vector<std::string>{}, 0);
    // Authentication off, as a server without grants runs.
    absl::StatusOr<std::unique_ptr<server::Authorizer>> auth =
        server::Authorizer::Create(server::AuthSettings());
    Check(auth.ok());
    auth_ = std::move(*auth);
    service_ = std::make_unique<server::DedupService>(
        store_.get(), &pool_, &pool_, &metrics_, auth_.get(), shards,
        server::RequestTranslator(policies, 512, shards), server::ServerLimits{},
        server::Execution::kWorkers);
  }

  std::string dir_;
  storage::ManualClock clock_;
  server::Metrics metrics_;
  server::WorkerPool pool_{1, 1};  // Unused by ExecuteBatch; the service needs one.
  std::shared_ptr<rocksdb::Env> env_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<server::Authorizer> auth_;
  std::unique_ptr<server::DedupService> service_;
  int inputs_ = 0;
  uint64_t generation_ = 0;
};

// What the answers so far say about one key.
struct KeyModel {
  uint64_t newest = 0;  // Largest token ACQUIRED.
  bool held = false;    // Stored IN_PROGRESS with `newest`, lapsed or not.
  std::string holder;
  int64_t lease_end = 0;
  bool completed = false;
  std::string result;
  int64_t retention_end = 0;
};

class Model {
 public:
  explicit Model(uint64_t generation) : generation_(generation) {}

  std::string Namespace(int which) const { return absl::StrCat("ns", which, "-g", generation_); }
  KeyModel& Key(const std::string& ns, const std::string& key) { return keys_[{ns, key}]; }
  const std::vector<uint64_t>& tokens() const { return tokens_; }
  void Saw(uint64_t token) { tokens_.push_back(token); }

 private:
  const uint64_t generation_;
  std::map<std::pair<std::string, std::string>, KeyModel> keys_;
  std::vector<uint64_t> tokens_;
};

std::string PickNamespace(FuzzedDataProvider& in, const Model& model) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
      return "";  // Invalid.
    case 1:
      return "Not-A-Namespace";  // Invalid.
    case 2:
    case 3:
      return model.Namespace(1);
    default:
      return model.Namespace(0);
  }
}

std::string PickKey(FuzzedDataProvider& in) {
  const int which = in.ConsumeIntegralInRange(0, 9);
  if (which == 0) return "";                     // Invalid.
  if (which == 1) return std::string(513, 'k');  // Invalid: over max_key_bytes.
  return absl::StrCat("key-", which % 4);
}

uint64_t PickToken(FuzzedDataProvider& in, const Model& model) {
  if (!model.tokens().empty() && in.ConsumeIntegralInRange(0, 3) != 0) {
    return model.tokens()[in.ConsumeIntegralInRange<size_t>(0, model.tokens().size() - 1)];
  }
  return in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint64_t>();
}

v1::Operation BuildItem(FuzzedDataProvider& in, const Model& model) {
  static constexpr const char* kOwners[] = {"owner-a", "owner-b", "owner-c", ""};
  static constexpr const char* kFingerprints[] = {"", "", "fp-1", "fp-2"};
  static constexpr uint64_t kLeases[] = {0, 1, 1000, 30'000, 600'000, 600'001};
  static constexpr uint64_t kRetentions[] = {0, 1, 3600'000, 7200'000};
  v1::Operation item;
  const std::string ns = PickNamespace(in, model);
  const std::string key = PickKey(in);
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: {
      v1::ClaimRequest* r = item.mutable_claim();
      r->set_namespace_(ns);
      r->set_key(key);
      r->set_owner(in.PickValueInArray(kOwners));
      r->set_fingerprint(in.PickValueInArray(kFingerprints));
      if (in.ConsumeBool()) r->set_lease_ms(in.PickValueInArray(kLeases));
      break;
    }
    case 1: {
      v1::CompleteRequest* r = item.mutable_complete();
      r->set_namespace_(ns);
      r->set_key(key);
      r->set_token(PickToken(in, model));
      r->set_result(in.ConsumeRandomLengthString(40));
      if (in.ConsumeBool()) r->set_retention_ms(in.PickValueInArray(kRetentions));
      break;
    }
    case 2: {
      v1::ReleaseRequest* r = item.mutable_release();
      r->set_namespace_(ns);
      r->set_key(key);
      r->set_token(PickToken(in, model));
      break;
    }
    case 3: {
      v1::ExtendRequest* r = item.mutable_extend();
      r->set_namespace_(ns);
      r->set_key(key);
      r->set_token(PickToken(in, model));
      if (in.ConsumeBool()) r->set_lease_ms(in.PickValueInArray(kLeases));
      break;
    }
    case 4: {
      v1::QueryRequest* r = item.mutable_query();
      r->set_namespace_(ns);
      r->set_key(key);
      break;
    }
    default:
      break;  // No operation: invalid.
  }
  return item;
}

void CheckClaim(const v1::ClaimRequest& r, const v1::ClaimResponse& a, int64_t now, Model& model) {
  KeyModel& m = model.Key(r.namespace_(), r.key());
  const bool live_lease = m.held && m.lease_end > now;
  switch (a.outcome()) {
    case v1::ClaimResponse::ACQUIRED:
      Check(a.token() != 0);
      if (a.token() == m.newest) {
        Check(live_lease && r.owner() == m.holder);  // Re-entrant: the lease is unchanged.
        Check(a.lease_expires_ms() == m.lease_end);
        return;
      }
      Check(a.token() > m.newest);
      Check(!live_lease);
      Check(!(m.completed && m.retention_end > now));
      Check(a.lease_expires_ms() ==
            now + static_cast<int64_t>(r.has_lease_ms() ? r.lease_ms() : kLeaseDefaultMs));
      m.newest = a.token();
      m.held = true;
      m.holder = r.owner();
      m.lease_end = a.lease_expires_ms();
      m.completed = false;
      model.Saw(a.token());
      return;
    case v1::ClaimResponse::IN_PROGRESS:
      Check(a.token() == 0);
      Check(live_lease && a.holder() == m.holder && r.owner() != m.holder);
      return;
    case v1::ClaimResponse::COMPLETED:
      Check(m.completed && m.retention_end > now && a.result() == m.result);
      return;
    case v1::ClaimResponse::FAILED:
      m.held = false;  // Poisoned (or already so): no token completes it any more.
      m.completed = false;
      return;
    case v1::ClaimResponse::MISMATCH:
      Check(!live_lease || a.token() == 0);
      return;
    default:
      Check(false);
  }
}

void CheckAnswer(const v1::Operation& item, const v1::OperationResult& answer, int64_t now,
                 Model& model) {
  switch (item.op_case()) {
    case v1::Operation::kClaim:
      Check(answer.has_claim());
      CheckClaim(item.claim(), answer.claim(), now, model);
      return;
    case v1::Operation::kComplete: {
      Check(answer.has_complete());
      const v1::CompleteRequest& r = item.complete();
      KeyModel& m = model.Key(r.namespace_(), r.key());
      if (answer.complete().outcome() == v1::CompleteResponse::OK) {
        Check(m.held && r.token() == m.newest);
        Check(answer.complete().retention_expires_ms() ==
              now + (r.has_retention_ms() ? static_cast<int64_t>(r.retention_ms())
                                          : kRetentionDefaultMs));
        m.held = false;
        m.completed = true;
        m.result = r.result();
        m.retention_end = answer.complete().retention_expires_ms();
      } else if (answer.complete().outcome() == v1::CompleteResponse::ALREADY_COMPLETED) {
        Check(m.completed && m.retention_end > now && r.token() == m.newest);
      }
      return;
    }
    case v1::Operation::kRelease: {
      Check(answer.has_release());
      const v1::ReleaseRequest& r = item.release();
      KeyModel& m = model.Key(r.namespace_(), r.key());
      const v1::ReleaseResponse::Outcome outcome = answer.release().outcome();
      if (outcome == v1::ReleaseResponse::OK || outcome == v1::ReleaseResponse::FAILED) {
        // A repeat of the release that ended the claim answers as it did.
        Check(r.token() == m.newest && r.token() != 0);
        m.held = false;
      }
      return;
    }
    case v1::Operation::kExtend: {
      Check(answer.has_extend());
      const v1::ExtendRequest& r = item.extend();
      KeyModel& m = model.Key(r.namespace_(), r.key());
      if (answer.extend().outcome() == v1::ExtendResponse::OK) {
        Check(m.held && r.token() == m.newest);
        Check(answer.extend().lease_expires_ms() ==
              now + static_cast<int64_t>(r.has_lease_ms() ? r.lease_ms() : kLeaseDefaultMs));
        m.lease_end = answer.extend().lease_expires_ms();
      }
      return;
    }
    case v1::Operation::kQuery: {
      Check(answer.has_query());
      const v1::Record& record = answer.query().record();
      if (record.state() == v1::STATE_IN_PROGRESS || record.state() == v1::STATE_ABSENT) {
        Check(record.token() == 0);
      }
      return;
    }
    case v1::Operation::OP_NOT_SET:
      break;
  }
  Check(false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* const harness = new Harness();
  server::DedupService& service = harness->Service();
  Model model(harness->NextGeneration());
  FuzzedDataProvider in(data, size);
  for (uint64_t batch_id = 1; in.remaining_bytes() > 0 && batch_id <= 16; ++batch_id) {
    v1::BatchRequest request;
    request.set_batch_id(batch_id);
    const int items = in.ConsumeIntegralInRange(0, 12);
    for (int i = 0; i < items; ++i) *request.add_operations() = BuildItem(in, model);

    const int64_t now = harness->clock().NowMs();
    v1::BatchResponse response;
    service.ExecuteBatch(request, server::Caller(), &response);
    Check(response.batch_id() == batch_id);
    Check(response.results_size() == request.operations_size());
    for (int i = 0; i < items; ++i) {
      const v1::Operation& item = request.operations(i);
      const v1::OperationResult& answer = response.results(i);
      const bool valid = service.translator().Translate(item).ok();
      Check(answer.has_error() != valid);
      if (valid) CheckAnswer(item, answer, now, model);
    }
    static constexpr int64_t kSteps[] = {0, 0, 1, 999, 1000, 30'000, 3600'000, 86'400'001};
    harness->clock().AdvanceMs(in.PickValueInArray(kSteps));
  }
  return 0;
}
