#ifndef DEDUP_SERVER_CLUSTER_ETCD_CLIENT_H_
#define DEDUP_SERVER_CLUSTER_ETCD_CLIENT_H_

// A small client of etcd's v3 gRPC API (proto/etcd/), with what dedupd's
// cluster code needs to keep membership, the shard map and leadership in
// etcd (docs/replication.md §3): reads of a key or a prefix, puts,
// compare-and-put on a key's modification revision, deletes, and leases.
// etcd is the coordination engine; this client adds no protocol of its own.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/security/credentials.h"

namespace dedup::server::cluster {

// A key as etcd stores it.
struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;  // Of the last change; what CompareAndPut compares.
  int64_t version = 0;
  int64_t lease = 0;  // 0: not attached to a lease.
};

// A granted lease.
struct EtcdLease {
  int64_t id = 0;
  absl::Duration ttl;  // As granted: etcd raises a request below its minimum.
};

// One condition of a transaction: the key's modification revision equals
// `mod_revision` (0: the key does not exist), or, with `value` set, its
// value equals it.
struct EtcdCompare {
  std::string key;
  int64_t mod_revision = 0;
  std::optional<std::string> value;
};

// One write of a transaction: a put (attached to `lease` when non-zero),
// or with `remove`, a delete of the key.
struct EtcdWrite {
  std::string key;
  std::string value;
  int64_t lease = 0;
  bool remove = false;
};

struct EtcdOptions {
  // host:port of each etcd member. Calls go to the first that answers.
  std::vector<std::string> endpoints;
  // Deadline of each call, retries on other members included.
  absl::Duration call_timeout = absl::Seconds(5);
  // null: plaintext (etcd on loopback in tests and the local scripts).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// Thread-safe: every method may be called concurrently (gRPC stubs are).
// Errors: UNAVAILABLE when no member answers within the call timeout (the
// caller retries or fails closed), INVALID_ARGUMENT for a bad request, and
// etcd's own codes otherwise; messages name the etcd method.
class EtcdClient {
 public:
  // Needs at least one endpoint; does not contact etcd.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Connect(const EtcdOptions& options);

  // The key, or nullopt when it does not exist.
  absl::StatusOr<std::optional<EtcdKeyValue>> Get(absl::string_view key);
  // Every key starting with `prefix`, in key order.
  absl::StatusOr<std::vector<EtcdKeyValue>> GetPrefix(absl::string_view prefix);
  // Writes the key, attached to `lease` when non-zero; returns the store's
  // revision after the write.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value, int64_t lease = 0);
  // Writes the key only if its modification revision is still
  // `expected_mod_revision` (0: only if it does not exist), atomically.
  // True when written; false when someone else changed it first.
  absl::StatusOr<bool> CompareAndPut(absl::string_view key, absl::string_view value,
                                     int64_t expected_mod_revision, int64_t lease = 0);
  // Applies every write if every comparison holds, atomically. True when
  // applied; false when a comparison failed (nothing was written).
  absl::StatusOr<bool> Txn(const std::vector<EtcdCompare>& compares,
                           const std::vector<EtcdWrite>& writes);
  // Deletes the key; returns how many keys were deleted (0 or 1).
  absl::StatusOr<int64_t> Delete(absl::string_view key);

  absl::StatusOr<EtcdLease> GrantLease(absl::Duration ttl);
  // Ends the lease now and deletes every key attached to it.
  absl::Status RevokeLease(int64_t id);
  // Renews the lease once; returns the TTL it has again. NOT_FOUND when the
  // lease has already ended (its keys are gone).
  absl::StatusOr<absl::Duration> KeepAliveOnce(int64_t id);

 private:
  struct Member {
    std::string endpoint;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };

  explicit EtcdClient(const EtcdOptions& options);

  // Runs `call` against each member in turn until one answers (anything but
  // UNAVAILABLE or DEADLINE_EXCEEDED), all within one call timeout.
  template <typename Call>
  absl::Status Invoke(absl::string_view method, Call call);

  const absl::Duration call_timeout_;
  std::vector<Member> members_;  // Constant after Connect.
};

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_ETCD_CLIENT_H_
