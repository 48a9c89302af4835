// Fuzzes request validation (server/request_translator.h) against the bounds
// design.md §4 documents, written out again here as an independent oracle.
//
// Each input is one Batch item, either decoded from the wire (protobuf
// bytes, so that unknown fields, bad UTF-8 in namespaces and odd lengths
// reach the translator as a client could send them) or built field by field
// with values at and around each bound. It is translated by one of three
// translators: the built-in default policy; a strict server with a small
// declared policy; and node 1 of a three-node cluster. Invariants:
// - the translator accepts exactly the items the oracle accepts, and
//   otherwise answers the code the oracle expects, with a message that
//   starts with the field the oracle names;
// - an accepted item becomes the operation asked for: same namespace, key,
//   owner, token, fingerprint and result, and every value the policy
//   supplies or bounds (lease, retention, max_attempts, the retention of a
//   poisoned key) is the namespace's.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "dedup/v1/dedup.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "server/namespace_policy.h"
#include "server/request_translator.h"
#include "server/shard_map.h"
#include "storage/key_codec.h"
#include "storage/operation.h"

namespace {

using dedup::server::Policy;
using dedup::server::PolicyTable;
using dedup::server::RequestTranslator;
using dedup::server::ShardMap;
namespace storage = dedup::storage;
namespace v1 = dedup::v1;

void Check(bool condition) {
  if (!condition) std::abort();
}

constexpr uint64_t kTenYearsMs = 10ull * 365 * 24 * 3600 * 1000;
constexpr char kDeclared[] = "coupon-deduct";

Policy SmallPolicy() {
  Policy policy;
  policy.lease_default_ms = 500;
  policy.lease_max_ms = 1000;
  policy.retention_default_ms = 7200'000;
  policy.retention_floor_ms = 0;  // The smallest floor a config may set.
  policy.max_result_bytes = 16;
  policy.max_attempts = 2;
  return policy;
}

struct Setup {
  std::shared_ptr<const PolicyTable> policies;
  uint32_t max_key_bytes;
  std::shared_ptr<const ShardMap> shards;  // Null: every key is local.
  std::unique_ptr<RequestTranslator> translator;
};

std::vector<Setup> MakeSetups() {
  std::vector<Setup> setups(3);
  setups[0].policies =
      std::make_shared<PolicyTable>(Policy{}, absl::flat_hash_map<std::string, Policy>{}, false);
  setups[0].max_key_bytes = 512;
  setups[1].policies = std::make_shared<PolicyTable>(
      Policy{}, absl::flat_hash_map<std::string, Policy>{{kDeclared, SmallPolicy()}}, true);
  setups[1].max_key_bytes = 16;
  setups[2].policies = std::make_shared<PolicyTable>(
      Policy{}, absl::flat_hash_map<std::string, Policy>{{kDeclared, SmallPolicy()}}, false);
  setups[2].max_key_bytes = 64;
  setups[2].shards = std::make_shared<ShardMap>(
      16, std::vector<std::string>{"127.0.0.1:7400", "127.0.0.1:7410", "127.0.0.1:7420"}, 1);
  for (Setup& s : setups) {
    s.translator = std::make_unique<RequestTranslator>(s.policies, s.max_key_bytes, s.shards);
  }
  return setups;
}

// What the oracle expects: OK, or a code and the field the message starts with.
struct Expected {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string field;
  const Policy* policy = nullptr;
};

Expected Reject(absl::StatusCode code, std::string field) { return {code, std::move(field)}; }
Expected Invalid(std::string field) {
  return Reject(absl::StatusCode::kInvalidArgument, std::move(field));
}

bool ValidNamespace(const std::string& ns) {
  auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (ns.empty() || ns.size() > 64 || !lower_alnum(ns[0])) return false;
  for (char c : ns) {
    if (!lower_alnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// Namespace, policy, key and owning node: what every request is checked for.
Expected CheckAddress(const Setup& setup, const std::string& ns, const std::string& key) {
  if (!ValidNamespace(ns)) return Invalid("namespace ");
  auto declared = setup.policies->declared().find(ns);
  if (declared == setup.policies->declared().end() && setup.policies->strict()) {
    return Reject(absl::StatusCode::kNotFound, "namespace '");
  }
  if (key.empty() || key.size() > setup.max_key_bytes) return Invalid("key: ");
  if (setup.shards != nullptr) {
    const uint32_t shard = storage::ShardOf(ns, key, setup.shards->shard_count());
    if (setup.shards->OwnerOfShard(shard) != setup.shards->self()) {
      return Reject(absl::StatusCode::kFailedPrecondition, "");
    }
  }
  Expected ok;
  static const Policy kDefault;
  ok.policy = declared != setup.policies->declared().end() ? &declared->second : &kDefault;
  return ok;
}

bool LeaseOk(bool has, uint64_t lease_ms, const Policy& policy) {
  return !has || (lease_ms >= 1 && lease_ms <= static_cast<uint64_t>(policy.lease_max_ms));
}

int64_t LeaseOf(bool has, uint64_t lease_ms, const Policy& policy) {
  return has ? static_cast<int64_t>(lease_ms) : policy.lease_default_ms;
}

Expected Oracle(const Setup& setup, const v1::Operation& item) {
  switch (item.op_case()) {
    case v1::Operation::kClaim: {
      const v1::ClaimRequest& r = item.claim();
      Expected e = CheckAddress(setup, r.namespace_(), r.key());
      if (e.code != absl::StatusCode::kOk) return e;
      if (r.owner().empty() || r.owner().size() > 256) return Invalid("owner: ");
      if (r.fingerprint().size() > 256) return Invalid("fingerprint: ");
      if (!LeaseOk(r.has_lease_ms(), r.lease_ms(), *e.policy)) return Invalid("lease_ms: ");
      return e;
    }
    case v1::Operation::kComplete: {
      const v1::CompleteRequest& r = item.complete();
      Expected e = CheckAddress(setup, r.namespace_(), r.key());
      if (e.code != absl::StatusCode::kOk) return e;
      if (r.token() == 0) return Invalid("token: ");
      if (r.result().size() > e.policy->max_result_bytes) return Invalid("result: ");
      if (r.has_retention_ms() &&
          (r.retention_ms() == 0 ||
           r.retention_ms() < static_cast<uint64_t>(e.policy->retention_floor_ms) ||
           r.retention_ms() > kTenYearsMs)) {
        return Invalid("retention_ms: ");
      }
      return e;
    }
    case v1::Operation::kRelease: {
      const v1::ReleaseRequest& r = item.release();
      Expected e = CheckAddress(setup, r.namespace_(), r.key());
      if (e.code != absl::StatusCode::kOk) return e;
      if (r.token() == 0) return Invalid("token: ");
      return e;
    }
    case v1::Operation::kExtend: {
      const v1::ExtendRequest& r = item.extend();
      Expected e = CheckAddress(setup, r.namespace_(), r.key());
      if (e.code != absl::StatusCode::kOk) return e;
      if (r.token() == 0) return Invalid("token: ");
      if (!LeaseOk(r.has_lease_ms(), r.lease_ms(), *e.policy)) return Invalid("lease_ms: ");
      return e;
    }
    case v1::Operation::kQuery:
      return CheckAddress(setup, item.query().namespace_(), item.query().key());
    case v1::Operation::OP_NOT_SET:
      break;
  }
  return Invalid("op: ");
}

// The accepted item became the operation it asked for, with the policy's values.
void CheckTranslated(const v1::Operation& item, const Policy& policy,
                     const storage::Operation& op) {
  switch (item.op_case()) {
    case v1::Operation::kClaim: {
      const v1::ClaimRequest& r = item.claim();
      const auto* claim = std::get_if<storage::ClaimOp>(&op);
      Check(claim != nullptr);
      Check(claim->ns == r.namespace_() && claim->key == r.key() && claim->owner == r.owner() &&
            claim->fingerprint == r.fingerprint());
      Check(claim->lease_ms == LeaseOf(r.has_lease_ms(), r.lease_ms(), policy));
      Check(claim->lease_ms >= 1 && claim->lease_ms <= policy.lease_max_ms);
      Check(claim->max_attempts == policy.max_attempts);
      Check(claim->failed_retention_ms == policy.retention_default_ms);
      return;
    }
    case v1::Operation::kComplete: {
      const v1::CompleteRequest& r = item.complete();
      const auto* complete = std::get_if<storage::CompleteOp>(&op);
      Check(complete != nullptr);
      Check(complete->ns == r.namespace_() && complete->key == r.key() &&
            complete->token == r.token() && complete->token != 0 && complete->result == r.result());
      Check(complete->retention_ms == (r.has_retention_ms() ? static_cast<int64_t>(r.retention_ms())
                                                            : policy.retention_default_ms));
      Check(complete->retention_ms >= 1 && complete->retention_ms >= policy.retention_floor_ms &&
            static_cast<uint64_t>(complete->retention_ms) <= kTenYearsMs);
      return;
    }
    case v1::Operation::kRelease: {
      const v1::ReleaseRequest& r = item.release();
      const auto* release = std::get_if<storage::ReleaseOp>(&op);
      Check(release != nullptr);
      Check(release->ns == r.namespace_() && release->key == r.key() &&
            release->token == r.token() && release->token != 0);
      Check(release->max_attempts == policy.max_attempts);
      Check(release->failed_retention_ms == policy.retention_default_ms);
      return;
    }
    case v1::Operation::kExtend: {
      const v1::ExtendRequest& r = item.extend();
      const auto* extend = std::get_if<storage::ExtendOp>(&op);
      Check(extend != nullptr);
      Check(extend->ns == r.namespace_() && extend->key == r.key() && extend->token == r.token() &&
            extend->token != 0);
      Check(extend->lease_ms == LeaseOf(r.has_lease_ms(), r.lease_ms(), policy));
      Check(extend->lease_ms >= 1 && extend->lease_ms <= policy.lease_max_ms);
      return;
    }
    case v1::Operation::kQuery: {
      const auto* query = std::get_if<storage::QueryOp>(&op);
      Check(query != nullptr);
      Check(query->ns == item.query().namespace_() && query->key == item.query().key());
      return;
    }
    case v1::Operation::OP_NOT_SET:
      break;
  }
  Check(false);
}

// Sizes and values at and around the bounds, or anything.
std::string Bytes(FuzzedDataProvider& in) {
  static constexpr size_t kSizes[] = {0, 1, 16, 17, 64, 65, 256, 257, 512, 513, 65536, 65537};
  if (in.ConsumeBool()) return std::string(in.PickValueInArray(kSizes), 'k');
  return in.ConsumeRandomLengthString(600);
}

std::string Namespace(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0:
      return kDeclared;
    case 1:
      return "payment-callback";
    case 2:
      return std::string(in.ConsumeIntegralInRange(63, 66), 'n');
    default:
      return in.ConsumeRandomLengthString(80);
  }
}

uint64_t Millis(FuzzedDataProvider& in) {
  static constexpr uint64_t kValues[] = {0,          1,         999,         1000,
                                         1001,       599'999,   600'000,     600'001,
                                         3599'999,   3600'000,  kTenYearsMs, kTenYearsMs + 1,
                                         UINT64_MAX, 1ull << 63};
  if (in.ConsumeBool()) return in.PickValueInArray(kValues);
  return in.ConsumeIntegral<uint64_t>();
}

v1::Operation BuildItem(FuzzedDataProvider& in) {
  v1::Operation item;
  const uint64_t token = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<uint64_t>(1, UINT64_MAX);
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: {
      v1::ClaimRequest* r = item.mutable_claim();
      r->set_namespace_(Namespace(in));
      r->set_key(Bytes(in));
      r->set_owner(Bytes(in));
      r->set_fingerprint(Bytes(in));
      if (in.ConsumeBool()) r->set_lease_ms(Millis(in));
      break;
    }
    case 1: {
      v1::CompleteRequest* r = item.mutable_complete();
      r->set_namespace_(Namespace(in));
      r->set_key(Bytes(in));
      r->set_token(token);
      r->set_result(Bytes(in));
      if (in.ConsumeBool()) r->set_retention_ms(Millis(in));
      break;
    }
    case 2: {
      v1::ReleaseRequest* r = item.mutable_release();
      r->set_namespace_(Namespace(in));
      r->set_key(Bytes(in));
      r->set_token(token);
      break;
    }
    case 3: {
      v1::ExtendRequest* r = item.mutable_extend();
      r->set_namespace_(Namespace(in));
      r->set_key(Bytes(in));
      r->set_token(token);
      if (in.ConsumeBool()) r->set_lease_ms(Millis(in));
      break;
    }
    case 4: {
      v1::QueryRequest* r = item.mutable_query();
      r->set_namespace_(Namespace(in));
      r->set_key(Bytes(in));
      break;
    }
    default:
      break;  // No operation set.
  }
  return item;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Setup>* const setups = new std::vector<Setup>(MakeSetups());
  // Wire items with bad UTF-8 in a string field fail to parse, and would log.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  if (size < 2) return 0;
  const Setup& setup = (*setups)[data[0] % setups->size()];
  v1::Operation item;
  if (data[1] & 1) {
    if (!item.ParseFromArray(data + 2, static_cast<int>(size - 2))) return 0;
  } else {
    FuzzedDataProvider in(data + 2, size - 2);
    item = BuildItem(in);
  }

  const Expected expected = Oracle(setup, item);
  const absl::StatusOr<storage::Operation> op = setup.translator->Translate(item);
  Check(op.status().code() == expected.code);
  if (!op.ok()) {
    Check(absl::StartsWith(op.status().message(), expected.field));
    return 0;
  }
  CheckTranslated(item, *expected.policy, *op);
  return 0;
}
