#include "server/cluster/replicator.h"

#include <time.h>

#include <algorithm>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel.h"
#include "server/logging.h"
#include "server/replication/move_rule.h"
#include "server/replication/quorum.h"
#include "server/replication/timing.h"
#include "spdlog/spdlog.h"
#include "storage/thread_name.h"

namespace dedup::server::cluster {
namespace {

namespace rv1 = ::dedup::replication::v1;
namespace core = ::dedup::server::replication;
using core::PeerTimeout;
using core::Tick;
using core::TrustedLease;
using storage::LogEntry;
using storage::LogPosition;

// A leader of epoch e hands out tokens e * 2^40 + 1, + 2, ...
constexpr int kTokenEpochShift = 40;
// Elections that may run at once on one node (ElectionWorker): enough
// that a node taking over a third of 1,024 shards at once does it in a
// few rounds, even when each election waits on a hung voter.
constexpr size_t kElectionWorkers = 64;

// Entries shipped in one call, at most (one entry always goes), and
// records in one page of a restore, when the peers' message limits allow.
constexpr size_t kShipBytes = 1 << 20;
constexpr size_t kMinShipBytes = 16 << 10;
// Entries a leader keeps for a follower that does not take them (down, or
// partitioned); one further behind is re-seeded from a copy of the
// records when it returns.
constexpr uint64_t kLogRetention = 500'000;
// Logs are trimmed in steps of at least this many entries.
constexpr uint64_t kTrimStep = 1024;
// A follower applies committed entries to its records once this many are
// waiting, or when an append brings no entries (a heartbeat, which also
// carries the last commit after a burst): one RocksDB write for many
// entries rather than one per append. Nothing waits for a follower's
// records; a follower that is elected applies everything committed first.
constexpr uint64_t kFollowerApplyEntries = 64;

// Nanoseconds on CLOCK_BOOTTIME: monotonic like the steady clock, and it
// keeps counting while the host is suspended, as etcd's clock does. A
// leader whose host slept through its lease then sees the lease as ended.
int64_t SteadyNowNs() {
  timespec now;
  clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

LogPosition FromProto(const rv1::Position& p) { return {p.epoch(), p.seq()}; }

void ToProto(LogPosition position, rv1::Position* out) {
  out->set_epoch(position.epoch);
  out->set_seq(position.seq);
}

// Placement values: "voters=0,1,2 learners=3" and moves:
// "from=0 to=3 state=adding".
std::string NodeList(const std::vector<uint32_t>& nodes) {
  std::string out;
  for (uint32_t node : nodes) absl::StrAppend(&out, out.empty() ? "" : ",", node);
  return out;
}

std::string PlacementValue(const std::vector<uint32_t>& voters,
                           const std::vector<uint32_t>& learners) {
  return absl::StrCat("voters=", NodeList(voters), " learners=", NodeList(learners));
}

bool ParseNodes(absl::string_view text, std::vector<uint32_t>* nodes) {
  nodes->clear();
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint32_t node;
    if (!absl::SimpleAtoi(part, &node) || std::count(nodes->begin(), nodes->end(), node) > 0) {
      return false;
    }
    nodes->push_back(node);
  }
  return true;
}

// Fields "name=value" separated by spaces.
std::map<std::string, std::string> Fields(absl::string_view value) {
  std::map<std::string, std::string> fields;
  for (absl::string_view part : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) continue;
    fields[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
  }
  return fields;
}

bool ParsePlacement(absl::string_view value, std::vector<uint32_t>* voters,
                    std::vector<uint32_t>* learners) {
  std::map<std::string, std::string> fields = Fields(value);
  if (!fields.count("voters") || !ParseNodes(fields["voters"], voters) || voters->empty() ||
      !ParseNodes(fields["learners"], learners)) {
    return false;
  }
  for (uint32_t node : *learners) {
    if (std::count(voters->begin(), voters->end(), node) > 0) return false;
  }
  return true;
}

std::string MoveValue(int32_t from, int32_t to, absl::string_view state) {
  return absl::StrCat("from=", from, " to=", to, " state=", state);
}

bool ParseMove(absl::string_view value, int32_t* from, int32_t* to, std::string* state) {
  std::map<std::string, std::string> fields = Fields(value);
  *state = fields["state"];
  return absl::SimpleAtoi(fields["from"], from) && absl::SimpleAtoi(fields["to"], to) &&
         (*state == "adding" || *state == "promoted");
}

std::string EmptyBatch() {
  // The representation of an empty RocksDB WriteBatch: sequence (8 bytes)
  // and count (4 bytes), all zero.
  return std::string(12, '\0');
}

}  // namespace

size_t ShipBytes(size_t peer_message_bytes) {
  return std::clamp<size_t>(peer_message_bytes / 2, kMinShipBytes, kShipBytes);
}

Replicator::Replicator(const ReplicatorOptions& options, EtcdClient* etcd,
                       storage::ReplicationLog* log, storage::Store* store)
    : options_(options),
      ship_bytes_(ShipBytes(options.peer_message_bytes)),
      etcd_(etcd),
      log_(log),
      store_(store) {}

absl::StatusOr<std::unique_ptr<Replicator>> Replicator::Start(const ReplicatorOptions& options,
                                                              EtcdClient* etcd,
                                                              storage::ReplicationLog* log,
                                                              storage::Store* store) {
  const uint32_t n = static_cast<uint32_t>(options.nodes.size());
  if (options.replication_factor < 2 || options.replication_factor > n) {
    // The first start of a cluster places shards over the nodes listed;
    // a node added later lists at least itself and those before it.
    return absl::InvalidArgumentError(absl::StrCat("replication factor must be 2..", n,
                                                   " (the node count), got ",
                                                   options.replication_factor));
  }
  if (options.self >= n) return absl::InvalidArgumentError("node index out of range");
  std::unique_ptr<Replicator> r(new Replicator(options, etcd, log, store));
  {
    absl::MutexLock lock(&r->nodes_mu_);
    r->addresses_ = options.nodes;
  }
  for (uint32_t s = 0; s < store->shard_count(); ++s) {
    auto shard = std::make_unique<Shard>();
    shard->index = s;
    r->shards_.push_back(std::move(shard));
  }
  absl::Status joined = r->Join();
  if (!joined.ok()) return joined;

  r->threads_.emplace_back([p = r.get()] {
    storage::NameThisThread("coordinate");
    p->CoordinateLoop();
  });
  r->threads_.emplace_back([p = r.get()] {
    storage::NameThisThread("elections");
    p->ElectionLoop();
  });
  r->EnsureShippers();
  return r;
}

std::string Replicator::Address(uint32_t node) {
  absl::MutexLock lock(&nodes_mu_);
  return node < addresses_.size() ? addresses_[node] : "";
}

rv1::Replication::Stub* Replicator::PeerStub(uint32_t node) {
  absl::MutexLock lock(&nodes_mu_);
  auto it = stubs_.find(node);
  if (it != stubs_.end()) return it->second.get();
  if (node >= addresses_.size() || addresses_[node].empty()) return nullptr;
  std::shared_ptr<grpc::ChannelCredentials> credentials = options_.peer_credentials != nullptr
                                                              ? options_.peer_credentials
                                                              : grpc::InsecureChannelCredentials();
  auto stub = rv1::Replication::NewStub(grpc::CreateChannel(addresses_[node], credentials));
  rv1::Replication::Stub* raw = stub.get();
  stubs_[node] = std::move(stub);
  return raw;
}

namespace {

constexpr char kShardCountKey[] = "shard-count";

// The value of the shard-count key.
absl::StatusOr<uint32_t> ParseShardCount(const EtcdKeyValue& kv) {
  uint32_t count;
  if (!absl::SimpleAtoi(kv.value, &count) || count < 1 || count > storage::kMaxShards) {
    return absl::DataLossError(
        absl::StrCat("the etcd key ", kv.key, " is not a shard count: '", kv.value, "'"));
  }
  return count;
}

}  // namespace

absl::StatusOr<uint32_t> ShardsForNewDirectory(EtcdClient* etcd, absl::string_view etcd_prefix) {
  absl::StatusOr<std::optional<EtcdKeyValue>> recorded =
      etcd->Get(absl::StrCat(etcd_prefix, kShardCountKey));
  if (!recorded.ok()) return recorded.status();
  if (!recorded->has_value()) return kNewClusterShards;
  return ParseShardCount(**recorded);
}

absl::Status Replicator::CheckShardCount(const std::vector<EtcdKeyValue>& placed) {
  const uint32_t own = static_cast<uint32_t>(shards_.size());
  const std::string key = Key(kShardCountKey);
  auto refuse = [&](uint32_t cluster, absl::string_view source) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this node's data directory has ", own, " shards but the cluster has ", cluster, " (",
        source,
        "): every node of a cluster must have the same shard count, or keys would be "
        "routed to different shards. Start this node on a new data directory with --shards=",
        cluster));
  };
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<std::optional<EtcdKeyValue>> recorded = etcd_->Get(key);
    if (!recorded.ok()) return recorded.status();
    if (recorded->has_value()) {
      absl::StatusOr<uint32_t> cluster = ParseShardCount(**recorded);
      if (!cluster.ok()) return cluster.status();
      if (*cluster != own) return refuse(*cluster, absl::StrCat("etcd's ", key));
      return absl::OkStatus();
    }
    // A cluster created before the count was recorded: its placement,
    // which its first node wrote for every shard it had, tells the count.
    uint32_t highest = 0;
    for (const EtcdKeyValue& kv : placed) {
      uint32_t s;
      if (absl::SimpleAtoi(kv.key.substr(kv.key.rfind('/') + 1), &s)) {
        highest = std::max(highest, s + 1);
      }
    }
    if (!placed.empty() && highest != own) {
      return refuse(highest, "etcd holds the placement of that many");
    }
    absl::StatusOr<bool> put =
        etcd_->Txn({{key, 0, std::nullopt}}, {{key, absl::StrCat(own), 0, false}});
    if (!put.ok()) return put.status();
    if (*put) return absl::OkStatus();
    // Another node recorded its count first: compare with that one.
  }
  return absl::UnavailableError(absl::StrCat("cannot record the shard count in etcd's ", key));
}

absl::Status Replicator::InitializePlacement() {
  absl::StatusOr<std::vector<EtcdKeyValue>> placed = etcd_->GetPrefix(Key("placement/"));
  if (!placed.ok()) return placed.status();
  absl::Status count = CheckShardCount(*placed);
  if (!count.ok()) return count;
  std::vector<bool> has(shards_.size(), false);
  for (const EtcdKeyValue& kv : *placed) {
    uint32_t s;
    if (absl::SimpleAtoi(kv.key.substr(kv.key.rfind('/') + 1), &s) && s < has.size()) {
      has[s] = true;
    }
  }
  // Shard s on nodes s..s+R-1 of those listed when the cluster was
  // created: the same as before placement lived in etcd, so a cluster
  // from then keeps its data where it is. Each key only if absent, so
  // that the first node to start decides and nobody overwrites a move.
  const uint32_t n = static_cast<uint32_t>(options_.nodes.size());
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    if (has[s]) continue;
    std::vector<uint32_t> voters;
    for (uint32_t k = 0; k < options_.replication_factor; ++k) voters.push_back((s + k) % n);
    const std::string key = Key(absl::StrCat("placement/", s));
    absl::StatusOr<bool> put =
        etcd_->Txn({{key, 0, std::nullopt}}, {{key, PlacementValue(voters, {}), 0, false}});
    if (!put.ok()) return put.status();
  }
  return absl::OkStatus();
}

Replicator::~Replicator() { Stop(); }

std::string Replicator::Key(absl::string_view suffix) const {
  return absl::StrCat(options_.etcd_prefix, suffix);
}

bool Replicator::LeaseValid() const { return SteadyNowNs() < lease_valid_until_ns_.load(); }

absl::Status Replicator::Join() {
  // Which shards this node holds: etcd's placement, written at the
  // cluster's first start.
  absl::Status placed = InitializePlacement();
  if (!placed.ok()) return placed;
  ReadLeadership();
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    if (shard->placement_revision == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot read the placement of shard ", shard->index, " from etcd"));
    }
  }

  const std::string member = Key(absl::StrCat("members/", options_.self));
  absl::StatusOr<std::optional<EtcdKeyValue>> known = etcd_->Get(member);
  if (!known.ok()) return known.status();
  absl::StatusOr<std::vector<EtcdKeyValue>> learning =
      etcd_->GetPrefix(Key(absl::StrCat("learner/", options_.self, "/")));
  if (!learning.ok()) return learning.status();
  // Per shard, the revision of this node's learner key; 0: none.
  std::vector<int64_t> learner(shards_.size(), 0);
  for (const EtcdKeyValue& kv : *learning) {
    uint32_t s;
    if (absl::SimpleAtoi(kv.key.substr(kv.key.rfind('/') + 1), &s) && s < shards_.size()) {
      learner[s] = kv.mod_revision;
    }
  }
  if (known->has_value() && !log_->Joined()) {
    // The cluster knows this node, so it once acknowledged writes, but its
    // data directory never joined: the volume was lost or replaced. It
    // must not vote with missing data; it re-seeds every shard first (§4).
    // The mark that it joined is written only after every learner key, so
    // a start cut short here comes back to this on the next one.
    LogEvent(spdlog::level::warn,
             "this node's data directory is new but the cluster knows the node: re-seeding every "
             "shard it holds before it votes or leads");
    for (auto& shard : shards_) {
      if (!shard->replica) continue;
      absl::StatusOr<int64_t> put =
          etcd_->Put(Key(absl::StrCat("learner/", options_.self, "/", shard->index)), "re-seed");
      if (!put.ok()) return put.status();
      learner[shard->index] = *put;
    }
  }
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->learner = shard->replica && learner[shard->index] != 0;
    shard->learner_revision = learner[shard->index];
  }
  // Every replica promises at least the epoch the map holds. One whose
  // volume was replaced has forgotten the promises it made; unfenced, it
  // could help a leader that an election has replaced to a majority.
  absl::StatusOr<std::vector<EtcdKeyValue>> map = etcd_->GetPrefix(Key("shards/"));
  if (!map.ok()) return map.status();
  for (const EtcdKeyValue& kv : *map) {
    uint32_t s;
    uint64_t epoch;
    if (!absl::SimpleAtoi(kv.key.substr(kv.key.rfind('/') + 1), &s) || s >= shards_.size() ||
        !shards_[s]->replica) {
      continue;
    }
    if (!absl::SimpleAtoi(kv.value, &epoch)) {
      return absl::DataLossError(
          absl::StrCat("the etcd shard-map entry ", kv.key, " is not an epoch: '", kv.value, "'"));
    }
    if (epoch <= log_->Promised(s)) continue;
    absl::StatusOr<LogPosition> promised = log_->Promise(s, epoch);
    if (!promised.ok()) return promised.status();
  }
  if (!log_->Joined()) {
    // Before the membership: a member key always means a directory that
    // joined, unless it is no longer the one that did.
    absl::Status joined = log_->MarkJoined();
    if (!joined.ok()) return joined;
  }
  if (!known->has_value()) {
    absl::StatusOr<int64_t> put = etcd_->Put(member, options_.nodes[options_.self]);
    if (!put.ok()) return put.status();
  }
  // The etcd lease last, once the per-shard work above is done: granted
  // before it, on a busy machine with many shards, it could end before
  // the node is registered under it. One that ends between the grant and
  // the registration is granted anew.
  absl::Status live;
  for (int attempt = 0; attempt < 3; ++attempt) {
    live = RenewLease();
    if (!absl::IsNotFound(live)) break;
  }
  if (!live.ok()) return live;
  ReadLeadership();
  return absl::OkStatus();
}

absl::Status Replicator::RenewLease() {
  const int64_t id = lease_id_.load();
  const int64_t sent = SteadyNowNs();
  if (id == 0) {
    absl::StatusOr<EtcdLease> lease = etcd_->GrantLease(options_.lease_ttl);
    if (!lease.ok()) return lease.status();
    absl::StatusOr<int64_t> alive = etcd_->Put(Key(absl::StrCat("nodes/", options_.self)),
                                               options_.nodes[options_.self], lease->id);
    if (!alive.ok()) return alive.status();
    lease_id_ = lease->id;
    lease_valid_until_ns_ = sent + absl::ToInt64Nanoseconds(TrustedLease(lease->ttl));
    return absl::OkStatus();
  }
  absl::StatusOr<absl::Duration> ttl = etcd_->KeepAliveOnce(id);
  if (ttl.ok()) {
    lease_valid_until_ns_ = sent + absl::ToInt64Nanoseconds(TrustedLease(*ttl));
    return absl::OkStatus();
  }
  if (absl::IsNotFound(ttl.status())) {
    // etcd ended the lease: every leader key of this node is gone.
    lease_valid_until_ns_ = 0;
    lease_id_ = 0;
    for (auto& shard : shards_) {
      absl::MutexLock lock(&shard->mu);
      if (shard->leading) StepDown(shard.get(), "its etcd lease ended");
    }
  }
  return ttl.status();
}

void Replicator::CoordinateLoop() {
  const absl::Duration tick = Tick(options_.lease_ttl);
  int64_t last_renewal = SteadyNowNs();
  absl::Time last_warning = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&stop_mu_);
      if (stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) return;
    }
    const int64_t now = SteadyNowNs();
    if (now - last_renewal >= absl::ToInt64Nanoseconds(options_.lease_ttl / 4) ||
        lease_id_.load() == 0) {
      last_renewal = now;
      absl::Status renewed = RenewLease();
      if (!renewed.ok() && absl::Now() - last_warning > absl::Seconds(5)) {
        last_warning = absl::Now();
        LogEvent(spdlog::level::warn,
                 LeaseValid() ? "cannot renew the etcd lease; still leading until it runs out"
                              : "cannot renew the etcd lease; this node leads no shard until etcd "
                                "answers again",
                 {{"error", renewed.message()}});
      }
    }
    StepDownWithoutLease();
    StepDownWithoutMajority();
    ReadLeadership();
    EnsureShippers();
    ClearCaughtUpLearners();
    TrimLogs();
    AdvanceMoves();
    if (!handing_off_.load()) BalanceLeaders();
  }
}

void Replicator::StepDownWithoutLease() {
  if (LeaseValid()) return;
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    // Its heartbeats would keep telling the followers that the shard has a
    // leader, and no follower would ever stand for election.
    if (shard->leading && !shard->electing) {
      StepDown(shard.get(), "this node could not renew its etcd lease in time");
    }
  }
}

void Replicator::StepDownWithoutMajority() {
  const absl::Time now = absl::Now();
  const absl::Duration window = core::QuorumWindow(options_.lease_ttl);
  std::vector<std::pair<uint32_t, uint64_t>> released;
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    if (!shard->leading || !shard->serving || now - shard->leading_since < window) continue;
    const bool answered = core::MajorityAnswered(shard->voters, options_.self, [&](uint32_t node) {
      auto it = shard->peers.find(node);
      return it != shard->peers.end() && now - it->second.last_heard <= window;
    });
    if (answered) continue;
    released.push_back({shard->index, shard->lead_epoch});
    StepDown(shard.get(), "no majority of its voters has answered for a while");
    // It could not commit; the voters it cannot reach elect meanwhile.
    shard->next_election = std::max(shard->next_election, now + options_.lease_ttl);
  }
  for (const auto& [s, epoch] : released) ReleaseLeaderKey(s, epoch);
}

void Replicator::ClearCaughtUpLearners() {
  for (auto& shard : shards_) {
    if (!shard->replica) continue;
    int64_t revision;
    {
      absl::MutexLock lock(&shard->mu);
      if (!shard->learner || !shard->learner_caught_up || shard->restoring) continue;
      revision = shard->learner_revision;
    }
    // Only the key this learner was made with: a re-seed begun meanwhile
    // wrote it again, and keeps it.
    const std::string key = Key(absl::StrCat("learner/", options_.self, "/", shard->index));
    absl::StatusOr<bool> deleted =
        etcd_->Txn({{key, revision, std::nullopt}}, {{key, "", 0, true}});
    if (!deleted.ok()) continue;
    if (!*deleted) {
      absl::StatusOr<std::optional<EtcdKeyValue>> current = etcd_->Get(key);
      if (!current.ok() || current->has_value()) continue;  // A newer re-seed's key.
    }
    absl::MutexLock lock(&shard->mu);
    if (shard->learner_revision != revision || !shard->learner_caught_up || shard->restoring) {
      continue;
    }
    shard->learner = false;
    shard->learner_caught_up = false;
    shard->learner_revision = 0;
    LogEvent(spdlog::level::info, "re-seeded shard; voting again",
             {{"shard", absl::StrCat(shard->index)}});
  }
}

void Replicator::TrimLogs() {
  for (auto& shard_ptr : shards_) {
    Shard& shard = *shard_ptr;
    if (!shard.replica) continue;
    uint64_t through;
    {
      absl::MutexLock lock(&shard.mu);
      if (!shard.leading) continue;
      const uint64_t applied = log_->Applied(shard.index).seq;
      const uint64_t last = log_->Last(shard.index).seq;
      uint64_t held = applied;
      for (const auto& [node, peer] : shard.peers) held = std::min(held, peer.match_seq);
      if (last > kLogRetention) held = std::max(held, std::min(applied, last - kLogRetention));
      shard.trim_seq = held;
      if (held < shard.trimmed + kTrimStep) continue;
      through = held;
    }
    absl::Status trimmed = log_->TrimThrough(shard.index, through);
    absl::MutexLock lock(&shard.mu);
    if (trimmed.ok()) shard.trimmed = std::max(shard.trimmed, through);
  }
}

void Replicator::ReadLeadership() {
  const absl::Time read_at = absl::Now();
  absl::StatusOr<std::vector<EtcdKeyValue>> kvs = etcd_->GetPrefix(options_.etcd_prefix);
  if (!kvs.ok()) return;
  const size_t n = shards_.size();
  struct Seen {
    int32_t leader = -1;
    uint64_t epoch = 0;
    int64_t lease = 0;
    int64_t mod_revision = 0;
    uint64_t map_epoch = 0;
    int32_t handoff = -1;
    bool placed = false;
    std::vector<uint32_t> voters, learners;
    int64_t placement_revision = 0;
    Move move;
  };
  std::vector<Seen> seen(n);
  std::map<uint32_t, std::string> members;
  std::set<uint32_t> live, draining;
  int64_t newest_placement = 0;
  for (const EtcdKeyValue& kv : *kvs) {
    absl::string_view rest = kv.key;
    if (!absl::ConsumePrefix(&rest, options_.etcd_prefix)) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(rest, '/');
    uint32_t s;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &s)) continue;
    if (parts[0] == "members") {
      members[s] = kv.value;
      continue;
    }
    if (parts[0] == "nodes") {
      live.insert(s);
      continue;
    }
    if (parts[0] == "draining") {
      draining.insert(s);
      continue;
    }
    if (s >= n) continue;
    if (parts[0] == "leader") {
      std::vector<absl::string_view> value = absl::StrSplit(kv.value, ' ');
      int32_t node;
      uint64_t epoch;
      if (value.size() == 2 && absl::SimpleAtoi(value[0], &node) &&
          absl::SimpleAtoi(value[1], &epoch)) {
        seen[s].leader = node;
        seen[s].epoch = epoch;
        seen[s].lease = kv.lease;
        seen[s].mod_revision = kv.mod_revision;
      }
    } else if (parts[0] == "shards") {
      if (!absl::SimpleAtoi(kv.value, &seen[s].map_epoch)) {
        LogEvent(spdlog::level::err, "an etcd shard-map entry is not an epoch",
                 {{"key", kv.key}, {"value", kv.value}});
      }
    } else if (parts[0] == "handoff") {
      if (!absl::SimpleAtoi(kv.value, &seen[s].handoff)) seen[s].handoff = -1;
    } else if (parts[0] == "placement") {
      if (ParsePlacement(kv.value, &seen[s].voters, &seen[s].learners)) {
        seen[s].placed = true;
        seen[s].placement_revision = kv.mod_revision;
        newest_placement = std::max(newest_placement, kv.mod_revision);
      } else {
        LogEvent(spdlog::level::err, "an etcd placement entry cannot be read; keeping the last",
                 {{"key", kv.key}, {"value", kv.value}});
      }
    } else if (parts[0] == "moves") {
      Move& move = seen[s].move;
      if (ParseMove(kv.value, &move.from, &move.to, &move.state)) {
        move.revision = kv.mod_revision;
      } else {
        move = Move();
        LogEvent(spdlog::level::err, "an etcd move entry cannot be read",
                 {{"key", kv.key}, {"value", kv.value}});
      }
    }
  }
  {
    absl::MutexLock lock(&nodes_mu_);
    for (const auto& [node, address] : members) {
      if (node >= addresses_.size()) addresses_.resize(node + 1);
      // The address a node registered with is the one its peers use; the
      // flags of this node may predate it.
      if (addresses_[node] != address && !address.empty()) {
        addresses_[node] = address;
        stubs_.erase(node);
      }
    }
    live_ = std::move(live);
    draining_ = std::move(draining);
    placement_revision_ = std::max(placement_revision_, newest_placement);
  }
  const int32_t self = static_cast<int32_t>(options_.self);
  std::vector<uint32_t> stale;  // Leader keys of an earlier run of this node.
  for (size_t s = 0; s < n; ++s) {
    Shard& shard = *shards_[s];
    Seen& view = seen[s];
    absl::MutexLock lock(&shard.mu);
    shard.handoff_to = view.handoff;
    shard.epoch = std::max({shard.epoch, view.epoch, view.map_epoch});
    // An election this node won after the read began: the read may
    // predate its leader key.
    const bool won_since = shard.electing || (shard.leading && shard.won_at >= read_at);
    if (shard.leading && !won_since && (view.leader != self || view.epoch != shard.lead_epoch)) {
      // Before the placement is taken: a deposed leader must not count
      // acknowledgements under voters that another leader placed.
      StepDown(&shard,
               view.leader < 0
                   ? std::string("its leader key in etcd is gone (the lease ended)")
                   : absl::StrCat("etcd names node ", view.leader, " at epoch ", view.epoch));
    }
    if (view.placed && view.placement_revision > shard.placement_revision) {
      ApplyPlacement(&shard, std::move(view.voters), std::move(view.learners),
                     view.placement_revision);
    }
    if (view.move.revision != shard.move.revision) {
      const absl::Time gone =
          shard.move.to == view.move.to ? shard.move.target_gone_since : absl::InfiniteFuture();
      shard.move = view.move;
      shard.move.target_gone_since = gone;
    }
    if (won_since) continue;
    if (view.leader < 0) {
      if (shard.leader >= 0) shard.leaderless_since = absl::Now();
      shard.leader = -1;
      continue;
    }
    if (view.leader == self && !shard.leading && !shard.electing) {
      stale.push_back(static_cast<uint32_t>(s));
    }
    if (shard.leader != view.leader) shard.leaderless_since = absl::InfiniteFuture();
    shard.leader = view.leader;
  }
  for (uint32_t s : stale) {
    // A key naming this node while it does not lead: an earlier run's
    // (that run is gone), or one it stepped down from. Either way the
    // shard can be taken over now rather than when the lease ends.
    etcd_
        ->Txn({{Key(absl::StrCat("leader/", s)), seen[s].mod_revision, std::nullopt}},
              {{Key(absl::StrCat("leader/", s)), "", 0, true}})
        .IgnoreError();
  }
}

void Replicator::ApplyPlacement(Shard* shard, std::vector<uint32_t> voters,
                                std::vector<uint32_t> learners, int64_t revision) {
  const uint32_t self = options_.self;
  const bool first = shard->placement_revision == 0;
  const bool held = shard->replica.load();
  const bool holds = Holds(voters, self) || Holds(learners, self);
  shard->voters = std::move(voters);
  shard->learners = std::move(learners);
  shard->placement_revision = revision;
  shard->placed_learner = Holds(shard->learners, self);
  const uint32_t s = shard->index;
  const bool has_data = log_->Last(s).seq > 0 || log_->Applied(s).seq > 0;
  if (holds && !held && !first && has_data) {
    // Added back after it was removed: whatever is left of the old copy is
    // dropped, and the leader copies the shard anew.
    absl::Status dropped = log_->BeginRestore(s);
    if (!dropped.ok()) {
      LogEvent(spdlog::level::err, "cannot clear an old copy of a shard added back to this node",
               {{"shard", absl::StrCat(s)}, {"error", dropped.message()}});
    }
  }
  shard->replica = holds;
  if (!holds) {
    if (shard->leading) StepDown(shard, "this node no longer holds the shard");
    shard->learner = false;
    shard->restoring = false;
    if (has_data) {
      // Moved away: every replica that now holds the shard has what it
      // committed, so this copy goes (records and log; the promise stays).
      absl::Status dropped = log_->BeginRestore(s);
      LogEvent(dropped.ok() ? spdlog::level::info : spdlog::level::err,
               dropped.ok() ? "dropped a shard this node no longer holds"
                            : "cannot drop a shard this node no longer holds",
               {{"shard", absl::StrCat(s)}, {"error", std::string(dropped.message())}});
    }
  }
  if (holds && !held && !first) {
    LogEvent(spdlog::level::info,
             shard->placed_learner ? "holding a shard as a learner (a move's target)"
                                   : "holding a shard",
             {{"shard", absl::StrCat(s)}});
  }
  if (shard->leading) {
    // Ship to every replica of the new placement, and to no other.
    for (auto it = shard->peers.begin(); it != shard->peers.end();) {
      const bool member = Holds(shard->voters, it->first) || Holds(shard->learners, it->first);
      it = member ? std::next(it) : shard->peers.erase(it);
    }
    const uint64_t next = log_->Last(s).seq + 1;
    for (const std::vector<uint32_t>* nodes : {&shard->voters, &shard->learners}) {
      for (uint32_t node : *nodes) {
        if (node != self && !shard->peers.count(node)) shard->peers[node].next_seq = next;
      }
    }
    AdvanceCommit(shard);
    KickShippers();
  }
  shard->changed.SignalAll();
}

void Replicator::EnsureShippers() {
  std::vector<std::pair<uint32_t, uint32_t>> wanted;
  for (auto& shard : shards_) {
    if (!shard->replica) continue;
    absl::MutexLock lock(&shard->mu);
    for (const std::vector<uint32_t>* nodes : {&shard->voters, &shard->learners}) {
      for (uint32_t node : *nodes) {
        if (node != options_.self) wanted.emplace_back(shard->index, node);
      }
    }
  }
  absl::MutexLock lock(&shippers_mu_);
  if (stopped_.load()) return;
  for (const auto& pair : wanted) {
    const uint32_t peer = pair.second;
    if (!shipping_.insert(peer).second) continue;
    shippers_.emplace_back([this, peer] {
      storage::NameThisThread(absl::StrCat("ship-to-", peer));
      ShipLoop(peer);
    });
  }
}

void Replicator::ElectionLoop() {
  const absl::Duration tick = Tick(options_.lease_ttl);
  while (true) {
    {
      absl::MutexLock lock(&stop_mu_);
      if (stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) return;
    }
    if (!LeaseValid() || handing_off_.load()) continue;
    std::vector<Shard*> due;
    for (auto& shard : shards_) {
      if (!shard->replica) continue;
      absl::MutexLock lock(&shard->mu);
      if (shard->election_queued || shard->leader >= 0 || shard->leading || shard->learner ||
          shard->placed_learner || !Holds(shard->voters, options_.self)) {
        continue;
      }
      // The shard's first voter tries first, then the next, and so on,
      // so leadership spreads over the nodes; a handed-off shard goes to
      // its target at once.
      const auto rank = std::find(shard->voters.begin(), shard->voters.end(), options_.self) -
                        shard->voters.begin();
      absl::Duration wait = tick * 2 * rank;
      if (shard->handoff_to == static_cast<int32_t>(options_.self)) {
        wait = absl::ZeroDuration();
      } else if (shard->handoff_to >= 0) {
        wait += options_.lease_ttl / 2;
      }
      const absl::Time since =
          shard->leaderless_since == absl::InfiniteFuture() ? absl::Now() : shard->leaderless_since;
      if (absl::Now() < since + wait || absl::Now() < shard->next_election) continue;
      shard->election_queued = true;
      due.push_back(shard.get());
    }
    if (due.empty()) continue;
    absl::MutexLock lock(&elect_mu_);
    elect_queue_.insert(elect_queue_.end(), due.begin(), due.end());
    while (elect_queue_.size() > elect_idle_ && electors_.size() < kElectionWorkers) {
      electors_.emplace_back([this] {
        storage::NameThisThread("elections");
        ElectionWorker();
      });
      ++elect_idle_;  // Counted as idle from its start, so that no more start for this work.
    }
  }
}

void Replicator::ElectionWorker() {
  std::mt19937_64 random(std::random_device{}());
  bool counted_idle = true;  // The starter counted this worker as idle.
  while (true) {
    Shard* shard;
    {
      absl::MutexLock lock(&elect_mu_);
      if (!counted_idle) ++elect_idle_;
      counted_idle = false;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(elect_mu_) {
        return !elect_queue_.empty() || stopped_.load();
      };
      elect_mu_.Await(absl::Condition(&ready));
      --elect_idle_;
      if (stopped_.load()) return;
      shard = elect_queue_.front();
      elect_queue_.pop_front();
    }
    if (LeaseValid() && !handing_off_.load()) Elect(shard);
    absl::MutexLock lock(&shard->mu);
    shard->election_queued = false;
    if (!shard->leading) {
      // Candidates that lost start again at different moments.
      shard->next_election =
          std::max(shard->next_election,
                   absl::Now() + Tick(options_.lease_ttl) +
                       absl::Milliseconds(random() %
                                          (1 + absl::ToInt64Milliseconds(options_.lease_ttl / 4))));
    }
  }
}

void Replicator::Elect(Shard* shard) {
  if (handing_off_.load()) return;
  const uint32_t s = shard->index;
  const std::string shard_key = Key(absl::StrCat("shards/", s));
  const std::string leader_key = Key(absl::StrCat("leader/", s));
  // Only a shard etcd says has no leader is contested: asking for promises
  // on a stale view would fence a leader that is alive.
  absl::StatusOr<std::optional<EtcdKeyValue>> current = etcd_->Get(leader_key);
  if (!current.ok() || current->has_value()) return;
  absl::StatusOr<std::optional<EtcdKeyValue>> map = etcd_->Get(shard_key);
  if (!map.ok()) return;
  uint64_t map_epoch = 0;
  int64_t map_revision = 0;
  if (map->has_value()) {
    // A map entry that is not a number is not guessed at: an epoch chosen
    // below the real one would be refused by every replica anyway.
    if (!absl::SimpleAtoi((*map)->value, &map_epoch)) {
      LogEvent(spdlog::level::err, "an etcd shard-map entry is not an epoch; no election",
               {{"shard", absl::StrCat(s)}, {"key", shard_key}, {"value", (*map)->value}});
      return;
    }
    map_revision = (*map)->mod_revision;
  }
  // The voters as etcd holds them now; the transaction below wins only
  // if they are still the voters then.
  const std::string placement_key = Key(absl::StrCat("placement/", s));
  absl::StatusOr<std::optional<EtcdKeyValue>> placement = etcd_->Get(placement_key);
  if (!placement.ok() || !placement->has_value()) return;
  std::vector<uint32_t> voters, learners;
  if (!ParsePlacement((*placement)->value, &voters, &learners) || !Holds(voters, options_.self)) {
    return;
  }
  const int64_t placement_revision = (*placement)->mod_revision;
  uint64_t known_epoch;
  {
    absl::MutexLock lock(&shard->mu);
    known_epoch = shard->epoch;
  }
  const uint64_t epoch = std::max({map_epoch, log_->Promised(s), known_epoch}) + 1;

  // Promises from a majority, this node's first.
  absl::StatusOr<LogPosition> mine = log_->Promise(s, epoch);
  if (!mine.ok()) {
    ++elections_lost_;
    return;
  }
  // Asked of every other replica at once, and decided as soon as the
  // outcome cannot change (core::Ballot): a replica that does not
  // answer (down, or hung) costs the election nothing while the others
  // decide it.
  struct SharedBallot {
    explicit SharedBallot(core::Ballot b) : ballot(std::move(b)) {}
    absl::Mutex mu;
    core::Ballot ballot ABSL_GUARDED_BY(mu);
  };
  struct Ask {
    grpc::ClientContext context;
    rv1::PromiseRequest request;
    rv1::PromiseResponse response;
  };
  auto shared =
      std::make_shared<SharedBallot>(core::Ballot(voters, options_.self, {mine->epoch, mine->seq}));
  for (uint32_t node : voters) {
    if (node == options_.self) continue;
    rv1::Replication::Stub* stub = PeerStub(node);
    if (stub == nullptr) {  // Its address is not known yet.
      absl::MutexLock lock(&shared->mu);
      shared->ballot.Unanswered(node);
      continue;
    }
    auto ask = std::make_shared<Ask>();
    ask->request.set_shard(s);
    ask->request.set_epoch(epoch);
    ask->request.set_candidate(options_.self);
    ask->context.set_deadline(absl::ToChronoTime(absl::Now() + PeerTimeout(options_.lease_ttl)));
    stub->async()->Promise(&ask->context, &ask->request, &ask->response,
                           [shared, ask, node](grpc::Status status) {
                             absl::MutexLock lock(&shared->mu);
                             if (!status.ok()) {
                               shared->ballot.Unanswered(node);
                             } else if (ask->response.promised()) {
                               const rv1::Position& last = ask->response.last();
                               shared->ballot.Granted(node, {last.epoch(), last.seq()});
                             } else {
                               shared->ballot.Refused(node, ask->response.promised_epoch());
                             }
                           });
  }
  core::Ballot::Outcome outcome;
  core::Position best;
  uint32_t best_node;
  uint64_t refused_epoch;
  {
    absl::MutexLock lock(&shared->mu);
    auto decided = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) {
      return shared->ballot.outcome() != core::Ballot::Outcome::kPending;
    };
    // The calls' own deadline ends every wait; the margin covers their
    // callbacks.
    shared->mu.AwaitWithTimeout(absl::Condition(&decided),
                                PeerTimeout(options_.lease_ttl) + absl::Milliseconds(100));
    outcome = shared->ballot.outcome();
    best = shared->ballot.best();
    best_node = shared->ballot.best_node();
    refused_epoch = shared->ballot.refused_epoch();
  }
  if (refused_epoch > 0) {
    // The next attempt goes above what the replicas have promised.
    absl::MutexLock lock(&shard->mu);
    shard->epoch = std::max(shard->epoch, refused_epoch);
  }
  if (outcome != core::Ballot::Outcome::kWon) {
    ++elections_lost_;
    return;
  }
  // The most advanced log of a majority holds every committed entry.
  if (best_node != options_.self) {
    absl::Status caught_up = CatchUpFrom(shard, best_node, {best.epoch, best.seq}, epoch);
    if (!caught_up.ok()) {
      ++elections_lost_;
      LogEvent(spdlog::level::warn, "cannot copy the log a new leader needs",
               {{"shard", absl::StrCat(s)}, {"error", caught_up.message()}});
      return;
    }
  }
  if (handing_off_.load()) return;
  // The leader key lives on this node's lease: without a lease (etcd
  // ended it while the promises were gathered) it would never expire.
  const int64_t lease = lease_id_.load();
  if (lease == 0 || !LeaseValid()) {
    ++elections_lost_;
    return;
  }
  {
    absl::MutexLock lock(&shard->mu);
    shard->electing = true;
  }
  absl::StatusOr<bool> won =
      etcd_->Txn({{shard_key, map_revision, std::nullopt},
                  {leader_key, 0, std::nullopt},
                  {placement_key, placement_revision, std::nullopt}},
                 {{shard_key, absl::StrCat(epoch), 0, false},
                  {leader_key, absl::StrCat(options_.self, " ", epoch), lease, false},
                  {Key(absl::StrCat("handoff/", s)), "", 0, true}});
  if (!won.ok() || !*won) {
    absl::MutexLock lock(&shard->mu);
    shard->electing = false;
    ++elections_lost_;
    return;
  }

  const LogPosition last = log_->Last(s);
  bool abandoned = false;
  {
    absl::MutexLock lock(&shard->mu);
    shard->electing = false;
    // HandOff (or Stop) passed this shard while it was not yet led here:
    // HandOff sets handing_off_ before it locks each shard.
    abandoned = handing_off_.load() || stopped_.load();
    if (!abandoned) {
      shard->won_at = absl::Now();
      shard->leading = true;
      shard->serving = false;
      shard->lead_epoch = epoch;
      shard->epoch = epoch;
      shard->leader = static_cast<int32_t>(options_.self);
      shard->leaderless_since = absl::InfiniteFuture();
      shard->tokens = epoch << kTokenEpochShift;
      shard->epoch_start_seq = last.seq + 1;
      shard->commit_seq = log_->Applied(s).seq;
      if (placement_revision > shard->placement_revision) {
        ApplyPlacement(shard, voters, learners, placement_revision);
      }
      shard->peers.clear();
      for (const std::vector<uint32_t>* nodes : {&shard->voters, &shard->learners}) {
        for (uint32_t node : *nodes) {
          if (node != options_.self) shard->peers[node].next_seq = last.seq + 1;
        }
      }
    }
  }
  if (abandoned) {
    ReleaseLeaderKey(s, epoch);
    return;
  }
  // The first entry of the epoch; once a majority holds it, every entry
  // before it in this log is committed too.
  absl::StatusOr<LogPosition> start = log_->Append(s, epoch, EmptyBatch());
  if (start.ok()) KickShippers();
  bool committed = false;
  if (start.ok()) {
    absl::MutexLock lock(&shard->mu);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
      return stopped_.load() || !shard->leading || shard->lead_epoch != epoch ||
             shard->commit_seq >= start->seq;
    };
    shard->mu.AwaitWithTimeout(absl::Condition(&done), options_.lease_ttl);
    committed = shard->leading && shard->lead_epoch == epoch && shard->commit_seq >= start->seq;
  }
  absl::Status applied = committed ? log_->ApplyThrough(s, start->seq) : absl::OkStatus();
  {
    absl::MutexLock lock(&shard->mu);
    if (committed && applied.ok() && shard->leading && shard->lead_epoch == epoch) {
      shard->serving = true;
      shard->leading_since = absl::Now();
      ++leader_changes_;
      LogEvent(spdlog::level::info, "leading shard",
               {{"shard", absl::StrCat(s)}, {"epoch", absl::StrCat(epoch)}});
      return;
    }
    if (shard->leading && shard->lead_epoch == epoch) {
      StepDown(shard, applied.ok() ? "no majority acknowledged the start of its epoch"
                                   : applied.message());
    }
  }
  ReleaseLeaderKey(s, epoch);
}

absl::Status Replicator::CatchUpFrom(Shard* shard, uint32_t node, LogPosition target,
                                     uint64_t epoch) {
  const uint32_t s = shard->index;
  rv1::Replication::Stub* stub = PeerStub(node);
  if (stub == nullptr) return absl::UnavailableError(absl::StrCat("node ", node, " is not known"));
  // Entries already applied here are committed, so the source holds them
  // alike; past them this log may hold an older epoch's tail. The copy
  // starts at this log's end when the source's entry there is the same
  // (the common case: a few entries behind), else after what is applied.
  LogPosition prev = log_->Applied(s);
  const LogPosition last = log_->Last(s);
  if (prev < last && last < target) {
    rv1::ReadLogRequest request;
    request.set_shard(s);
    request.set_from_seq(last.seq);
    request.set_max_bytes(1);  // One entry always comes.
    rv1::ReadLogResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + PeerTimeout(options_.lease_ttl)));
    if (stub->ReadLog(&context, request, &response).ok() && response.entries_size() > 0 &&
        response.entries(0).seq() == last.seq && response.entries(0).epoch() == last.epoch) {
      prev = last;
    }
  }
  while (prev < target && prev.seq < target.seq + 1) {
    if (stopped_.load()) return absl::UnavailableError("stopping");
    rv1::ReadLogRequest request;
    request.set_shard(s);
    request.set_from_seq(prev.seq + 1);
    request.set_max_bytes(ship_bytes_);
    rv1::ReadLogResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + PeerTimeout(options_.lease_ttl) * 4));
    grpc::Status status = stub->ReadLog(&context, request, &response);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("reading node ", node, "'s log: ", status.error_message()));
    }
    if (response.entries_size() == 0) break;
    std::vector<LogEntry> entries;
    for (const rv1::Entry& e : response.entries())
      entries.push_back({e.epoch(), e.seq(), e.batch()});
    absl::Status appended = log_->AppendAfter(s, epoch, prev, entries);
    if (!appended.ok()) return appended;
    prev = entries.back().position();
    if (prev.seq >= target.seq) break;
  }
  if (log_->Last(s) < target) {
    return absl::UnavailableError(
        absl::StrCat("node ", node, "'s log ended before ", target.epoch, "/", target.seq));
  }
  return absl::OkStatus();
}

Replicator::ShipPlan Replicator::PlanAppend(Shard* shard, uint32_t peer, size_t max_bytes,
                                            bool heartbeat, bool from_shared_loop, Outgoing* out) {
  const uint32_t s = shard->index;
  uint64_t next;
  {
    absl::MutexLock lock(&shard->mu);
    if (stopped_.load() || !shard->replica.load() ||
        !(Holds(shard->voters, peer) || Holds(shard->learners, peer))) {
      return ShipPlan::kGone;
    }
    if (!shard->leading) return ShipPlan::kIdle;
    if (from_shared_loop && shard->dedicated.count(peer)) return ShipPlan::kIdle;
    out->to_learner = Holds(shard->learners, peer);
    if (from_shared_loop && out->to_learner) return ShipPlan::kDedicate;
    next = shard->peers[peer].next_seq;
    if (!heartbeat && next > log_->Last(s).seq) return ShipPlan::kIdle;
    out->shard = shard;
    out->epoch = shard->lead_epoch;
    out->request.Clear();
    out->request.set_shard(s);
    out->request.set_epoch(shard->lead_epoch);
    out->request.set_leader(options_.self);
    out->request.set_commit_seq(shard->commit_seq);
    out->request.set_trim_seq(shard->trim_seq);
  }
  // The entry before `next` and what follows it.
  LogPosition prev;
  std::vector<LogEntry> entries;
  const LogPosition last = log_->Last(s);
  if (next > 1 && last.seq == next - 1) {
    // A heartbeat to a follower that has everything: no read (with
    // hundreds of shards, most of them idle, these are most calls).
    prev = last;
  } else if (next > 1) {
    absl::StatusOr<std::vector<LogEntry>> read = log_->Read(s, next - 1, max_bytes);
    if (!read.ok()) return ShipPlan::kRetry;
    if (!read->empty() && read->front().seq == next - 1) {
      prev = read->front().position();
      entries.assign(std::make_move_iterator(read->begin() + 1),
                     std::make_move_iterator(read->end()));
    } else if (log_->Applied(s).seq == next - 1) {
      prev = log_->Applied(s);
      absl::StatusOr<std::vector<LogEntry>> rest = log_->Read(s, next, max_bytes);
      if (!rest.ok()) return ShipPlan::kRetry;
      entries = std::move(*rest);
    } else {
      // The follower needs entries this log no longer holds (trimmed).
      return ShipPlan::kReseed;
    }
  } else {
    // From the very start: a follower with nothing (a new volume).
    absl::StatusOr<std::vector<LogEntry>> read = log_->Read(s, 1, max_bytes);
    if (!read.ok()) return ShipPlan::kRetry;
    if (!read->empty() && read->front().seq == 1) {
      entries = std::move(*read);
    } else if (!read->empty() || log_->Applied(s).seq > 0) {
      return ShipPlan::kReseed;
    }  // Otherwise a heartbeat: nothing written yet.
  }
  // Never past what this log held when `next` was read: entries of a
  // later epoch cannot be here, as only this leader appends.
  out->prev = prev;
  out->entries = entries.size();
  ToProto(prev, out->request.mutable_prev());
  for (LogEntry& e : entries) {
    rv1::Entry* entry = out->request.add_entries();
    entry->set_epoch(e.epoch);
    entry->set_seq(e.seq);
    entry->set_batch(std::move(e.batch));
  }
  out->bytes = out->request.ByteSizeLong();
  return ShipPlan::kSend;
}

bool Replicator::TakeAppendResult(const Outgoing& sent, uint32_t peer, grpc::Status status,
                                  const rv1::AppendResponse& response, bool* more) {
  Shard* shard = sent.shard;
  absl::MutexLock lock(&shard->mu);
  if (!shard->leading || shard->lead_epoch != sent.epoch) return false;
  if (!shard->peers.count(peer)) return false;  // No longer placed.
  Peer& p = shard->peers[peer];
  if (status.ok() && response.result() == rv1::AppendResponse::NOT_REPLICA) {
    // It has not seen the placement that adds it yet: again at the next
    // heartbeat.
    return false;
  }
  if (!status.ok()) return false;
  p.sent_bytes += sent.bytes;
  if (p.live_since == absl::InfiniteFuture() ||
      absl::Now() - p.last_heard > Tick(options_.lease_ttl) * 2) {
    p.live_since = absl::Now();
  }
  p.last_heard = absl::Now();
  p.applied_seq = response.applied().seq();
  const uint64_t next = sent.prev.seq + 1;
  switch (response.result()) {
    case rv1::AppendResponse::APPENDED:
      p.match_seq = std::max(p.match_seq, sent.prev.seq + sent.entries);
      p.next_seq = sent.prev.seq + sent.entries + 1;
      AdvanceCommit(shard);
      break;
    case rv1::AppendResponse::MISMATCH:
      // A follower whose volume was replaced holds less than before. From
      // the follower's end when its log is shorter; otherwise it holds
      // another epoch's tail, and everything after what it has applied
      // (committed, so the same here) is sent again at once rather than
      // one entry back per call.
      p.match_seq = std::min<uint64_t>(p.match_seq, response.last().seq());
      p.next_seq = response.last().seq() + 1 < next ? response.last().seq() + 1
                                                    : response.applied().seq() + 1;
      if (p.next_seq >= next) p.next_seq = next > 1 ? next - 1 : 1;
      p.next_seq = std::max<uint64_t>(p.next_seq, 1);
      break;
    case rv1::AppendResponse::FENCED:
      StepDown(shard, absl::StrCat("node ", peer, " promised epoch ", response.promised()));
      return true;
    default:
      break;
  }
  if (p.next_seq <= log_->Last(shard->index).seq) *more = true;
  return false;
}

void Replicator::StartDedicated(Shard* shard, uint32_t peer) {
  {
    absl::MutexLock lock(&shard->mu);
    if (!shard->dedicated.insert(peer).second) return;
  }
  absl::MutexLock lock(&shippers_mu_);
  if (stopped_.load()) return;
  shippers_.emplace_back([this, shard, peer] {
    storage::NameThisThread(absl::StrCat("ship-", shard->index, "-to-", peer));
    ShipDedicated(shard, peer);
  });
}

void Replicator::KickShippers() {
  absl::MutexLock lock(&ship_mu_);
  ++ship_generation_;
}

void Replicator::ShipDedicated(Shard* shard, uint32_t peer) {
  const uint32_t s = shard->index;
  const absl::Duration tick = Tick(options_.lease_ttl);
  // Hands the pair back to the peer's shared loop.
  auto leave = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
    shard->dedicated.erase(peer);
    absl::MutexLock kick(&ship_mu_);
    ++ship_generation_;
  };
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&shard->mu);
      auto placed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
        return shard->replica.load() &&
               (Holds(shard->voters, peer) || Holds(shard->learners, peer));
      };
      auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
        return stopped_.load() || !placed() || !shard->leading;
      };
      auto work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
        return done() || !Holds(shard->learners, peer) ||
               shard->peers[peer].next_seq <= log_->Last(s).seq;
      };
      if (!first) shard->mu.AwaitWithTimeout(absl::Condition(&work), tick);
      // A voter comes here only to be re-seeded, once; a learner (a move's
      // target) stays until it votes, at the move's pace.
      if (done() || (!first && !Holds(shard->learners, peer))) {
        leave();
        return;
      }
    }
    rv1::Replication::Stub* stub = PeerStub(peer);
    if (stub == nullptr) {
      // Placed before its address reached this node.
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick);
      continue;
    }
    // A move's target gets small pieces, so that its pace is even and its
    // progress shows: a second's worth at most (a quarter of the rate).
    const size_t ship_bytes =
        std::clamp<size_t>(options_.move_bytes_per_second / 4, kMinShipBytes, ship_bytes_);
    Outgoing out;
    const ShipPlan plan = PlanAppend(shard, peer, ship_bytes, /*heartbeat=*/true,
                                     /*from_shared_loop=*/false, &out);
    if (plan == ShipPlan::kRetry) {
      // A read of this node's own log failed (storage trouble, counted and
      // reported by the store): again after a pause, never a re-seed.
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(100));
      continue;
    }
    if (plan == ShipPlan::kReseed) {
      uint64_t epoch;
      {
        absl::MutexLock lock(&shard->mu);
        epoch = shard->lead_epoch;
      }
      absl::Status reseeded = Reseed(shard, peer, epoch);
      if (!reseeded.ok()) {
        LogEvent(spdlog::level::warn, "cannot re-seed a follower",
                 {{"shard", absl::StrCat(s)},
                  {"follower", absl::StrCat(peer)},
                  {"error", reseeded.message()}});
        absl::MutexLock lock(&stop_mu_);
        stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(1));
      }
      continue;
    }
    if (plan != ShipPlan::kSend) continue;
    // A move's copy goes at the move's pace, so that serving keeps its p99.
    if (out.to_learner && out.entries > 0) PaceMove(shard, peer, out.bytes);
    rv1::AppendResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + PeerTimeout(options_.lease_ttl)));
    grpc::Status status = stub->Append(&context, out.request, &response);
    CountShipped(peer, out.entries);
    bool more = false;
    if (TakeAppendResult(out, peer, status, response, &more)) ReleaseLeaderKey(s, out.epoch);
    if (!status.ok()) {
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                std::min(tick, absl::Milliseconds(100)));
    }
  }
}

void Replicator::ShipLoop(uint32_t peer) {
  const absl::Duration tick = Tick(options_.lease_ttl);
  uint64_t seen = 0;
  absl::Time last_heartbeat = absl::InfinitePast();
  bool more = true;
  bool ship_supported = true;
  absl::Time last_refusal_logged = absl::InfinitePast();
  while (!stopped_.load()) {
    if (!more) {
      absl::MutexLock lock(&ship_mu_);
      auto woken = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ship_mu_) {
        return stopped_.load() || ship_generation_ != seen;
      };
      ship_mu_.AwaitWithDeadline(absl::Condition(&woken), last_heartbeat + tick);
    }
    {
      absl::MutexLock lock(&ship_mu_);
      seen = ship_generation_;
    }
    if (stopped_.load()) return;
    more = false;
    const absl::Time now = absl::Now();
    // New entries go at once; the commit alone waits for the next
    // heartbeat (or rides on the next entries), so that a write costs
    // each follower one call, not two.
    const bool heartbeat = now - last_heartbeat >= tick;
    if (heartbeat) last_heartbeat = now;
    rv1::Replication::Stub* stub = PeerStub(peer);
    if (stub == nullptr) {
      // Placed before its address reached this node.
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick);
      continue;
    }
    // Every shard this node leads and the peer follows, in one call, up
    // to ship_bytes_ of entries in all; the rest goes in the next call.
    std::vector<Outgoing> outgoing;
    rv1::ShipRequest request;
    size_t budget = ship_bytes_;
    bool retry = false;
    for (auto& held : shards_) {
      Shard* shard = held.get();
      if (!shard->replica.load()) continue;
      if (budget < kMinShipBytes) {
        more = true;
        break;
      }
      Outgoing out;
      switch (PlanAppend(shard, peer, budget, heartbeat, /*from_shared_loop=*/true, &out)) {
        case ShipPlan::kSend:
          budget -= std::min(budget, out.bytes);
          outgoing.push_back(std::move(out));
          break;
        case ShipPlan::kReseed:
        case ShipPlan::kDedicate:
          StartDedicated(shard, peer);
          break;
        case ShipPlan::kRetry:
          retry = true;
          break;
        case ShipPlan::kIdle:
        case ShipPlan::kGone:
          break;
      }
    }
    if (outgoing.empty()) {
      if (retry) {
        // A read of this node's own log failed (storage trouble, counted
        // and reported by the store): again after a pause.
        absl::MutexLock lock(&stop_mu_);
        stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(100));
        more = true;
      }
      continue;
    }
    std::vector<grpc::Status> statuses(outgoing.size());
    std::vector<rv1::AppendResponse> responses(outgoing.size());
    const absl::Time deadline = absl::Now() + PeerTimeout(options_.lease_ttl);
    grpc::Status shipped;
    if (ship_supported) {
      for (Outgoing& out : outgoing) request.add_appends()->Swap(&out.request);
      rv1::ShipResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(deadline));
      shipped = stub->Ship(&context, request, &response);
      size_t entries = 0;
      for (const Outgoing& out : outgoing) entries += out.entries;
      CountShipped(peer, entries);
      if (shipped.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        // A peer from before Ship (a rolling upgrade): one call per shard.
        ship_supported = false;
        for (size_t i = 0; i < outgoing.size(); ++i) {
          outgoing[i].request.Swap(request.mutable_appends(static_cast<int>(i)));
        }
      } else if (shipped.ok() && response.results_size() != request.appends_size()) {
        shipped = grpc::Status(grpc::StatusCode::INTERNAL, "a Ship answer of the wrong length");
      }
      for (size_t i = 0; ship_supported && i < outgoing.size(); ++i) {
        statuses[i] = shipped;
        if (shipped.ok()) responses[i].Swap(response.mutable_results(static_cast<int>(i)));
      }
    }
    if (!ship_supported) {
      for (size_t i = 0; i < outgoing.size(); ++i) {
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(deadline));
        statuses[i] = stub->Append(&context, outgoing[i].request, &responses[i]);
        if (!statuses[i].ok()) shipped = statuses[i];
      }
    }
    for (size_t i = 0; i < outgoing.size(); ++i) {
      if (TakeAppendResult(outgoing[i], peer, statuses[i], responses[i], &more)) {
        ReleaseLeaderKey(outgoing[i].shard->index, outgoing[i].epoch);
      }
    }
    if (!shipped.ok()) {
      const grpc::StatusCode code = shipped.error_code();
      if (code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED &&
          absl::Now() - last_refusal_logged > absl::Seconds(10)) {
        // Not an outage, which the peer's own health shows: a refusal the
        // operator has to see, such as a message over the peer's limit.
        last_refusal_logged = absl::Now();
        LogEvent(spdlog::level::warn, "a follower refuses this node's replication calls",
                 {{"follower", absl::StrCat(peer)}, {"error", shipped.error_message()}});
      }
      absl::MutexLock lock(&stop_mu_);
      stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                                std::min(tick, absl::Milliseconds(100)));
      more = true;
    }
  }
}

void Replicator::AdvanceCommit(Shard* shard) {
  // Only voters count (MajorityHolds): a learner (a move's target) may hold
  // less than a majority of voters does, and an entry acknowledged by it
  // alone would not survive the loss of this leader.
  const uint64_t last = log_->Last(shard->index).seq;
  const uint64_t majority_holds =
      core::MajorityHolds(shard->voters, [&](uint32_t node) -> uint64_t {
        if (node == options_.self) return last;
        auto it = shard->peers.find(node);
        return it == shard->peers.end() ? 0 : it->second.match_seq;
      });
  shard->commit_seq = core::NextCommit(shard->commit_seq, majority_holds, shard->epoch_start_seq);
}

void Replicator::StepDown(Shard* shard, absl::string_view why) {
  if (!shard->leading) return;
  shard->leading = false;
  shard->serving = false;
  shard->leader = -1;
  shard->leaderless_since = absl::Now();
  LogEvent(spdlog::level::warn, "no longer leading shard",
           {{"shard", absl::StrCat(shard->index)},
            {"epoch", absl::StrCat(shard->lead_epoch)},
            {"reason", std::string(why)}});
}

void Replicator::ReleaseLeaderKey(uint32_t shard, uint64_t epoch) {
  const std::string key = Key(absl::StrCat("leader/", shard));
  etcd_->Txn({{key, 0, absl::StrCat(options_.self, " ", epoch)}}, {{key, "", 0, true}})
      .IgnoreError();
}

absl::Status Replicator::CheckLeading(uint32_t s) {
  Shard& shard = *shards_[s];
  absl::MutexLock lock(&shard.mu);
  if (shard.leading && shard.serving && LeaseValid()) return absl::OkStatus();
  if (shard.leader >= 0 && shard.leader != static_cast<int32_t>(options_.self)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", s, " is led by node ", shard.leader, " (", Address(shard.leader),
                     ") at epoch ", shard.epoch, "; fetch the topology and send it there"));
  }
  if (shard.leading && !shard.serving) {
    return absl::UnavailableError(
        absl::StrCat("shard ", s, " is changing leader on this node; retry"));
  }
  if (shard.leading) {
    return absl::UnavailableError(
        absl::StrCat("shard ", s, ": this node cannot reach etcd to renew its leadership; retry"));
  }
  return absl::UnavailableError(
      absl::StrCat("shard ", s, " has no leader at the moment (an election is due); retry"));
}

absl::StatusOr<uint64_t> Replicator::NextToken(uint32_t s) {
  Shard& shard = *shards_[s];
  absl::MutexLock lock(&shard.mu);
  if (!shard.leading) return absl::UnavailableError(absl::StrCat("shard ", s, ": not leading"));
  if ((shard.tokens + 1) >> kTokenEpochShift != shard.lead_epoch) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shard ", s, ": the tokens of epoch ", shard.lead_epoch, " are used up"));
  }
  return ++shard.tokens;
}

std::vector<absl::Status> Replicator::Commit(std::vector<storage::ShardWrite> writes) {
  std::vector<absl::Status> results(writes.size());
  std::vector<LogPosition> positions(writes.size());
  std::vector<LogEntry> entries(writes.size());
  std::vector<uint64_t> epochs(writes.size(), 0);
  const absl::Status storage_health = store_->BackgroundError();
  // One append, and one sync, for every shard of the call.
  std::vector<storage::ReplicationLog::ShardAppend> appends;
  std::vector<size_t> appended_writes;
  for (size_t i = 0; i < writes.size(); ++i) {
    Shard& shard = *shards_[writes[i].shard];
    if (!storage_health.ok()) {
      results[i] = absl::UnavailableError(storage_health.message());
      continue;
    }
    absl::MutexLock lock(&shard.mu);
    if (!shard.leading || !shard.serving) {
      results[i] = absl::UnavailableError(
          absl::StrCat("shard ", shard.index, " lost its leader before the write; retry"));
      continue;
    }
    epochs[i] = shard.lead_epoch;
    appends.push_back({shard.index, epochs[i], std::move(writes[i].batch)});
    appended_writes.push_back(i);
  }
  if (!appends.empty()) {
    absl::StatusOr<std::vector<LogPosition>> appended = log_->AppendAll(appends);
    for (size_t k = 0; k < appended_writes.size(); ++k) {
      const size_t i = appended_writes[k];
      if (!appended.ok()) {
        results[i] = absl::UnavailableError(appended.status().message());
        epochs[i] = 0;
        continue;
      }
      positions[i] = (*appended)[k];
      // Applied as written once committed, not read back from the log.
      entries[i] = {positions[i].epoch, positions[i].seq, std::move(appends[k].batch)};
    }
    if (appended.ok()) KickShippers();
  }
  const absl::Time deadline = absl::Now() + options_.lease_ttl;
  // The committed writes, applied together below: one RocksDB write for
  // every shard of the call.
  std::vector<storage::ReplicationLog::ShardApply> applies;
  std::vector<size_t> applied_writes;
  for (size_t i = 0; i < writes.size(); ++i) {
    if (epochs[i] == 0) continue;
    Shard& shard = *shards_[writes[i].shard];
    const uint64_t epoch = epochs[i];
    const uint64_t seq = positions[i].seq;
    bool committed;
    {
      absl::MutexLock lock(&shard.mu);
      auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
        return stopped_.load() || !shard.leading || shard.lead_epoch != epoch ||
               shard.commit_seq >= seq;
      };
      shard.mu.AwaitWithDeadline(absl::Condition(&done), deadline);
      committed = shard.leading && shard.lead_epoch == epoch && shard.commit_seq >= seq;
      if (!committed && shard.leading && shard.lead_epoch == epoch) {
        // The entry may still be committed by a later leader, after writes
        // this node would decide without it: only a new election, which
        // applies everything committed first, may serve the shard again.
        StepDown(&shard, "a write was not acknowledged by a majority in time");
      }
    }
    if (!committed) {
      ReleaseLeaderKey(shard.index, epoch);
      results[i] = absl::UnavailableError(absl::StrCat(
          "shard ", shard.index,
          ": the write was not acknowledged by a majority of its replicas in time; it may or may "
          "not take effect, retry"));
      continue;
    }
    applies.push_back({shard.index, seq, absl::MakeConstSpan(&entries[i], 1)});
    applied_writes.push_back(i);
  }
  if (applies.empty()) return results;
  const std::vector<absl::Status> applied = log_->ApplyAll(applies);
  const bool lease_valid = LeaseValid();
  for (size_t k = 0; k < applied_writes.size(); ++k) {
    const size_t i = applied_writes[k];
    results[i] = applied[k];
    if (!results[i].ok()) {
      // Committed, but not in this node's records: decisions from them
      // would miss it. A new election applies everything committed first.
      Shard& shard = *shards_[applies[k].shard];
      bool stepped_down = false;
      {
        absl::MutexLock lock(&shard.mu);
        if (shard.leading && shard.lead_epoch == epochs[i]) {
          StepDown(&shard,
                   absl::StrCat("a committed write could not be applied: ", results[i].message()));
          stepped_down = true;
        }
      }
      if (stepped_down) ReleaseLeaderKey(shard.index, epochs[i]);
      continue;
    }
    if (results[i].ok() && !lease_valid) {
      // A node paused past its lease may have been replaced while it
      // waited: it answers nothing more. The entry is on a majority, so
      // every later leader holds it.
      results[i] = absl::UnavailableError(absl::StrCat(
          "shard ", applies[k].shard,
          ": this node's leadership lease ran out before it could answer; the write is on a "
          "majority of the replicas and takes effect, retry"));
    }
  }
  return results;
}

rv1::AppendResponse Replicator::HandleAppend(const rv1::AppendRequest& request, bool sync) {
  rv1::AppendResponse response;
  const uint32_t s = request.shard();
  auto fill = [&](rv1::AppendResponse::Result result) {
    response.set_result(result);
    ToProto(log_->Last(s), response.mutable_last());
    ToProto(log_->Applied(s), response.mutable_applied());
    response.set_promised(log_->Promised(s));
    return response;
  };
  if (s >= shards_.size()) {
    response.set_result(rv1::AppendResponse::FENCED);
    return response;
  }
  Shard& shard = *shards_[s];
  absl::MutexLock lock(&shard.mu);
  if (!shard.replica) {
    // A move's target that has not read its new placement yet, or a
    // replica moved off: either way nothing is appended here.
    response.set_result(rv1::AppendResponse::NOT_REPLICA);
    return response;
  }
  if (request.epoch() < log_->Promised(s)) {
    ++fenced_appends_;
    return fill(rv1::AppendResponse::FENCED);
  }
  if (shard.leading && request.epoch() >= shard.lead_epoch) {
    StepDown(&shard, absl::StrCat("node ", request.leader(), " leads epoch ", request.epoch()));
  }
  shard.leader = static_cast<int32_t>(request.leader());
  shard.epoch = std::max(shard.epoch, request.epoch());
  shard.leaderless_since = absl::InfiniteFuture();
  std::vector<LogEntry> entries;
  entries.reserve(request.entries_size());
  for (const rv1::Entry& e : request.entries()) entries.push_back({e.epoch(), e.seq(), e.batch()});
  const LogPosition prev = FromProto(request.prev());
  absl::Status appended = log_->AppendAfter(s, request.epoch(), prev, entries, sync);
  if (absl::IsFailedPrecondition(appended)) {
    ++fenced_appends_;
    return fill(rv1::AppendResponse::FENCED);
  }
  if (absl::IsAborted(appended)) return fill(rv1::AppendResponse::MISMATCH);
  if (!appended.ok()) {
    LogEvent(spdlog::level::err, "cannot append the leader's entries",
             {{"shard", absl::StrCat(s)}, {"error", appended.message()}});
    return fill(rv1::AppendResponse::MISMATCH);
  }
  // What is committed and certainly the leader's: up to the last entry it
  // sent (a longer tail here may be an older epoch's).
  const uint64_t apply_to = std::min<uint64_t>(request.commit_seq(), prev.seq + entries.size());
  const uint64_t applied_seq = log_->Applied(s).seq;
  if (apply_to > applied_seq &&
      (entries.empty() || apply_to - applied_seq >= kFollowerApplyEntries)) {
    absl::Status applied = log_->ApplyThrough(s, apply_to, entries);
    if (!applied.ok()) {
      LogEvent(spdlog::level::err, "cannot apply committed entries",
               {{"shard", absl::StrCat(s)}, {"error", applied.message()}});
    }
  }
  const uint64_t trim_to = std::min<uint64_t>(request.trim_seq(), log_->Applied(s).seq);
  if (trim_to >= shard.trimmed + kTrimStep && log_->TrimThrough(s, trim_to).ok()) {
    shard.trimmed = trim_to;
  }
  if (shard.restoring && prev.seq == 0) {
    // A copy that its leader abandoned (it stepped down): this leader
    // sends its whole log instead, which rebuilds every record.
    shard.restoring = false;
  }
  if (shard.learner && !shard.restoring && prev.seq + entries.size() >= request.commit_seq()) {
    // It holds every entry committed so far, as this leader's own: it may
    // vote again once its etcd key is gone (ClearCaughtUpLearners).
    shard.learner_caught_up = true;
  }
  return fill(rv1::AppendResponse::APPENDED);
}

absl::StatusOr<rv1::ShipResponse> Replicator::HandleShip(const rv1::ShipRequest& request) {
  rv1::ShipResponse response;
  bool entries = false;
  for (const rv1::AppendRequest& append : request.appends()) {
    *response.add_results() = HandleAppend(append, /*sync=*/false);
    entries = entries || append.entries_size() > 0;
  }
  // Also when every entry was here already: an earlier call may have
  // written them and not synced them yet.
  if (entries) {
    absl::Status synced = log_->SyncAppends();
    if (!synced.ok()) {
      LogEvent(spdlog::level::err, "cannot sync the leader's entries",
               {{"error", synced.message()}});
      return absl::InternalError(synced.message());
    }
  }
  return response;
}

rv1::PromiseResponse Replicator::HandlePromise(const rv1::PromiseRequest& request) {
  rv1::PromiseResponse response;
  const uint32_t s = request.shard();
  if (s >= shards_.size() || !shards_[s]->replica) {
    response.set_reason(absl::StrCat("this node holds no replica of shard ", s));
    return response;
  }
  Shard& shard = *shards_[s];
  absl::MutexLock lock(&shard.mu);
  response.set_promised_epoch(log_->Promised(s));
  ToProto(log_->Applied(s), response.mutable_applied());
  if (shard.placed_learner || !Holds(shard.voters, options_.self)) {
    response.set_reason(
        "this replica is a learner of the shard (a move's target) and does not vote");
    ToProto(log_->Last(s), response.mutable_last());
    return response;
  }
  if (shard.learner) {
    response.set_reason("this replica is re-seeding and may not vote yet");
    ToProto(log_->Last(s), response.mutable_last());
    return response;
  }
  absl::StatusOr<LogPosition> promised = log_->Promise(s, request.epoch());
  if (!promised.ok()) {
    response.set_reason(std::string(promised.status().message()));
    ToProto(log_->Last(s), response.mutable_last());
    return response;
  }
  if (shard.leading && request.epoch() > shard.lead_epoch) {
    StepDown(&shard,
             absl::StrCat("promised epoch ", request.epoch(), " to node ", request.candidate()));
  }
  // The candidate is given time to finish before this replica contends
  // for the shard itself: two candidates asking at once both lose.
  shard.next_election = std::max(shard.next_election, absl::Now() + Tick(options_.lease_ttl) * 4);
  response.set_promised(true);
  response.set_promised_epoch(request.epoch());
  ToProto(*promised, response.mutable_last());
  return response;
}

absl::StatusOr<rv1::ReadLogResponse> Replicator::HandleReadLog(const rv1::ReadLogRequest& request) {
  const uint32_t s = request.shard();
  if (s >= shards_.size() || !shards_[s]->replica) {
    return absl::FailedPreconditionError(absl::StrCat("this node holds no replica of shard ", s));
  }
  absl::StatusOr<std::vector<LogEntry>> entries =
      log_->Read(s, request.from_seq(), std::clamp<uint64_t>(request.max_bytes(), 1, ship_bytes_));
  if (!entries.ok()) return entries.status();
  rv1::ReadLogResponse response;
  for (const LogEntry& e : *entries) {
    rv1::Entry* out = response.add_entries();
    out->set_epoch(e.epoch);
    out->set_seq(e.seq);
    out->set_batch(e.batch);
  }
  ToProto(log_->Last(s), response.mutable_last());
  return response;
}

absl::Status Replicator::Reseed(Shard* shard, uint32_t peer, uint64_t epoch) {
  const uint32_t s = shard->index;
  rv1::Replication::Stub* stub = PeerStub(peer);
  if (stub == nullptr) return absl::UnavailableError(absl::StrCat("node ", peer, " is not known"));
  // Every entry through `position` is in the records copied; the log from
  // there on is replayed over the copy.
  const LogPosition position = log_->Applied(s);
  LogEvent(spdlog::level::info, "re-seeding a follower from a copy of the shard",
           {{"shard", absl::StrCat(s)},
            {"follower", absl::StrCat(peer)},
            {"position", absl::StrCat(position.epoch, "/", position.seq)}});
  bool to_learner;
  {
    absl::MutexLock lock(&shard->mu);
    to_learner = Holds(shard->learners, peer);
  }
  const size_t page_bytes = to_learner ? std::clamp<size_t>(options_.move_bytes_per_second / 4,
                                                            kMinShipBytes, ship_bytes_)
                                       : ship_bytes_;
  std::string after;
  uint64_t pages = 0, records = 0;
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&shard->mu);
      if (stopped_.load() || !shard->leading || shard->lead_epoch != epoch) {
        return absl::UnavailableError("no longer leading");
      }
    }
    absl::StatusOr<storage::ReplicationLog::RecordPage> page =
        log_->ReadRecords(s, after, page_bytes);
    if (!page.ok()) return page.status();
    rv1::RestoreRequest request;
    request.set_shard(s);
    request.set_epoch(epoch);
    request.set_leader(options_.self);
    request.set_begin(first);
    request.set_done(page->done);
    ToProto(position, request.mutable_position());
    for (auto& [key, value] : page->records) {
      rv1::StoredRecord* out = request.add_records();
      out->set_key(std::move(key));
      out->set_value(std::move(value));
    }
    records += request.records_size();
    const uint64_t request_bytes = request.ByteSizeLong();
    if (to_learner) PaceMove(shard, peer, request_bytes);
    rv1::RestoreResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Status status = stub->Restore(&context, request, &response);
    if (!status.ok()) return absl::UnavailableError(status.error_message());
    if (!response.accepted()) return absl::FailedPreconditionError(response.reason());
    {
      absl::MutexLock lock(&shard->mu);
      if (auto it = shard->peers.find(peer); it != shard->peers.end()) {
        it->second.sent_bytes += request_bytes;
      }
    }
    ++pages;
    if (page->done) break;
    after = page->last_key;
  }
  LogEvent(spdlog::level::info, "re-seeded a follower",
           {{"shard", absl::StrCat(s)},
            {"follower", absl::StrCat(peer)},
            {"records", absl::StrCat(records)},
            {"pages", absl::StrCat(pages)}});
  absl::MutexLock lock(&shard->mu);
  if (!shard->leading || shard->lead_epoch != epoch || !shard->peers.count(peer)) {
    return absl::OkStatus();
  }
  Peer& p = shard->peers[peer];
  p.match_seq = position.seq;
  p.next_seq = position.seq + 1;
  AdvanceCommit(shard);
  return absl::OkStatus();
}

rv1::RestoreResponse Replicator::HandleRestore(const rv1::RestoreRequest& request) {
  rv1::RestoreResponse response;
  const uint32_t s = request.shard();
  if (s >= shards_.size() || !shards_[s]->replica) {
    response.set_reason(absl::StrCat("this node holds no replica of shard ", s));
    return response;
  }
  Shard& shard = *shards_[s];
  auto fenced = [&]() {
    ++fenced_appends_;
    response.set_reason(
        absl::StrCat("epoch ", request.epoch(), " is fenced (promised ", log_->Promised(s), ")"));
    return response;
  };
  if (request.epoch() < log_->Promised(s)) return fenced();
  // A learner until caught up again, its records partial meanwhile: the
  // key is written before anything is dropped, and written anew by every
  // copy begun (so that a learner cleared meanwhile is a learner again).
  // Outside the shard lock: etcd may be slow.
  int64_t learner_revision = 0;
  if (request.begin()) {
    absl::StatusOr<int64_t> put =
        etcd_->Put(Key(absl::StrCat("learner/", options_.self, "/", s)), "re-seed");
    if (!put.ok()) {
      response.set_reason(
          absl::StrCat("cannot mark this replica a learner in etcd: ", put.status().message()));
      return response;
    }
    learner_revision = *put;
  }
  absl::MutexLock lock(&shard.mu);
  if (request.epoch() < log_->Promised(s)) return fenced();
  if (shard.leading) StepDown(&shard, absl::StrCat("node ", request.leader(), " re-seeds it"));
  shard.leader = static_cast<int32_t>(request.leader());
  shard.epoch = std::max(shard.epoch, request.epoch());
  absl::Status status;
  if (request.begin()) {
    shard.learner = true;
    shard.learner_caught_up = false;
    shard.learner_revision = learner_revision;
    status = log_->BeginRestore(s);
    if (status.ok()) {
      shard.restoring = true;
      shard.trimmed = 0;
      LogEvent(spdlog::level::info, "re-seeding shard from its leader",
               {{"shard", absl::StrCat(s)}, {"leader", absl::StrCat(request.leader())}});
    }
  } else if (!shard.restoring) {
    status = absl::FailedPreconditionError("no restore of this shard has begun here");
  }
  std::vector<std::pair<std::string, std::string>> records;
  records.reserve(request.records_size());
  for (const rv1::StoredRecord& r : request.records()) records.emplace_back(r.key(), r.value());
  if (status.ok()) status = log_->RestoreRecords(s, records);
  if (status.ok() && request.done()) {
    status = log_->FinishRestore(s, FromProto(request.position()));
    if (status.ok()) shard.restoring = false;
  }
  if (!status.ok()) {
    response.set_reason(std::string(status.message()));
    return response;
  }
  response.set_accepted(true);
  return response;
}

void Replicator::PaceMove(Shard* shard, uint32_t peer, uint64_t bytes) {
  const uint64_t rate = options_.move_bytes_per_second;
  if (rate == 0) return;
  absl::Time due;
  {
    absl::MutexLock lock(&shard->mu);
    auto it = shard->peers.find(peer);
    if (it == shard->peers.end()) return;
    due = it->second.sending_since +
          absl::Seconds(static_cast<double>(it->second.sent_bytes + bytes) / rate);
  }
  absl::MutexLock lock(&stop_mu_);
  stop_mu_.AwaitWithDeadline(absl::Condition(&stopping_), due);
}

absl::Status Replicator::MoveShard(uint32_t s, uint32_t from, uint32_t to) {
  if (s >= shards_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no shard ", s, ": the cluster has ", shards_.size()));
  }
  if (from == to) return absl::InvalidArgumentError("a move needs two different nodes");
  const std::string placement_key = Key(absl::StrCat("placement/", s));
  const std::string move_key = Key(absl::StrCat("moves/", s));
  absl::StatusOr<std::optional<EtcdKeyValue>> placement = etcd_->Get(placement_key);
  if (!placement.ok()) return placement.status();
  absl::StatusOr<std::optional<EtcdKeyValue>> moving = etcd_->Get(move_key);
  if (!moving.ok()) return moving.status();
  absl::StatusOr<std::optional<EtcdKeyValue>> live = etcd_->Get(Key(absl::StrCat("nodes/", to)));
  if (!live.ok()) return live.status();
  absl::StatusOr<std::optional<EtcdKeyValue>> draining =
      etcd_->Get(Key(absl::StrCat("draining/", to)));
  if (!draining.ok()) return draining.status();
  if (moving->has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", s, " is already moving (", (*moving)->value,
                     "); one move of a shard at a time: wait for it to finish"));
  }
  std::vector<uint32_t> voters, learners;
  if (!placement->has_value() || !ParsePlacement((*placement)->value, &voters, &learners)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", s, " has no readable placement in etcd"));
  }
  if (!Holds(voters, from)) {
    return absl::FailedPreconditionError(absl::StrCat("node ", from, " is not a voter of shard ", s,
                                                      " (voters: ", NodeList(voters), ")"));
  }
  if (Holds(voters, to) || Holds(learners, to)) {
    return absl::FailedPreconditionError(absl::StrCat("node ", to, " already holds shard ", s,
                                                      " (voters: ", NodeList(voters),
                                                      "; learners: ", NodeList(learners), ")"));
  }
  if (!live->has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", to, " is not live (it holds no etcd lease): start it, then move shards to it"));
  }
  if (draining->has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", to, " is draining: no shard moves to it"));
  }
  std::vector<uint32_t> with_target = learners;
  with_target.push_back(to);
  absl::StatusOr<bool> started = etcd_->Txn(
      {{placement_key, (*placement)->mod_revision, std::nullopt}, {move_key, 0, std::nullopt}},
      {{placement_key, PlacementValue(voters, with_target), 0, false},
       {move_key, MoveValue(static_cast<int32_t>(from), static_cast<int32_t>(to), "adding"), 0,
        false}});
  if (!started.ok()) return started.status();
  if (!*started) {
    return absl::AbortedError(
        absl::StrCat("the placement of shard ", s, " changed while the move was prepared; retry"));
  }
  LogEvent(spdlog::level::info, "shard move requested",
           {{"shard", absl::StrCat(s)}, {"from", absl::StrCat(from)}, {"to", absl::StrCat(to)}});
  return absl::OkStatus();
}

absl::Status Replicator::SetDraining(uint32_t node, bool draining) {
  absl::StatusOr<std::optional<EtcdKeyValue>> member =
      etcd_->Get(Key(absl::StrCat("members/", node)));
  if (!member.ok()) return member.status();
  if (!member->has_value()) {
    return absl::NotFoundError(absl::StrCat("node ", node, " has never joined this cluster"));
  }
  const std::string key = Key(absl::StrCat("draining/", node));
  if (draining) {
    absl::StatusOr<int64_t> put = etcd_->Put(key, "draining");
    if (!put.ok()) return put.status();
  } else {
    absl::StatusOr<int64_t> deleted = etcd_->Delete(key);
    if (!deleted.ok()) return deleted.status();
  }
  return absl::OkStatus();
}

void Replicator::AdvanceMoves() {
  const absl::Time now = absl::Now();
  const absl::Duration tick = Tick(options_.lease_ttl);
  for (auto& shard_ptr : shards_) {
    Shard* shard = shard_ptr.get();
    if (!shard->replica) continue;
    core::MoveStep step;
    Move move;
    uint64_t epoch;
    std::vector<uint32_t> voters, learners;
    int64_t placement_revision;
    {
      absl::MutexLock lock(&shard->mu);
      if (!shard->leading || !shard->serving || shard->move.revision == 0) continue;
      move = shard->move;
      epoch = shard->lead_epoch;
      voters = shard->voters;
      learners = shard->learners;
      placement_revision = shard->placement_revision;
      core::MoveFacts facts;
      facts.state = move.state == "adding" ? core::MoveFacts::State::kAdding
                                           : core::MoveFacts::State::kPromoted;
      facts.self = options_.self;
      facts.from = static_cast<uint32_t>(move.from);
      facts.to = static_cast<uint32_t>(move.to);
      facts.voters = voters;
      facts.learners = learners;
      {
        absl::MutexLock nodes(&nodes_mu_);
        facts.target_live = live_.count(facts.to) > 0;
      }
      if (facts.target_live) {
        shard->move.target_gone_since = absl::InfiniteFuture();
      } else if (shard->move.target_gone_since == absl::InfiniteFuture()) {
        shard->move.target_gone_since = now;
      }
      facts.target_gone_for =
          facts.target_live ? absl::ZeroDuration() : now - shard->move.target_gone_since;
      facts.lease_ttl = options_.lease_ttl;
      facts.last_seq = log_->Last(shard->index).seq;
      facts.commit_seq = shard->commit_seq;
      for (const auto& [node, peer] : shard->peers) {
        facts.match[node] = peer.match_seq;
        if (peer.last_heard != absl::InfinitePast()) facts.silent_for[node] = now - peer.last_heard;
      }
      facts.heard_within = tick * 2;
      step = core::DecideMoveStep(facts);
    }
    if (step == core::MoveStep::kWait) continue;
    const uint32_t s = shard->index;
    const std::string placement_key = Key(absl::StrCat("placement/", s));
    const std::string move_key = Key(absl::StrCat("moves/", s));
    const uint32_t from = static_cast<uint32_t>(move.from);
    const uint32_t to = static_cast<uint32_t>(move.to);
    if (step == core::MoveStep::kHandOff) {
      // The source leads: the target (a voter now) takes the shard, and
      // removes the source as the new leader.
      HandOffShard(shard, move.to, now + tick, absl::StrCat("the shard moves to node ", to));
      continue;
    }
    // Only while this node still leads at `epoch`, the placement is the one
    // read and the move record unchanged: one change of the replica set at
    // a time, by the leader that sees it.
    std::vector<EtcdCompare> compares = {{Key(absl::StrCat("shards/", s)), 0, absl::StrCat(epoch)},
                                         {placement_key, placement_revision, std::nullopt},
                                         {move_key, move.revision, std::nullopt}};
    std::vector<EtcdWrite> writes;
    const char* done = "";
    if (step == core::MoveStep::kPromote) {
      std::vector<uint32_t> new_voters = voters, new_learners;
      for (uint32_t node : learners) {
        if (node != to) new_learners.push_back(node);
      }
      new_voters.push_back(to);
      writes = {{placement_key, PlacementValue(new_voters, new_learners), 0, false},
                {move_key, MoveValue(move.from, move.to, "promoted"), 0, false}};
      done = "move target caught up and votes";
    } else if (step == core::MoveStep::kRemove) {
      const std::vector<uint32_t> new_voters = core::VotersAfterRemoval(voters, from, to);
      writes = {{placement_key, PlacementValue(new_voters, learners), 0, false},
                {move_key, "", 0, true}};
      done = "shard moved";
    } else {
      std::vector<uint32_t> new_learners;
      for (uint32_t node : learners) {
        if (node != to) new_learners.push_back(node);
      }
      writes = {{placement_key, PlacementValue(voters, new_learners), 0, false},
                {move_key, "", 0, true}};
      done = "shard move rolled back (its target is gone, or no longer a learner)";
    }
    absl::StatusOr<bool> changed = etcd_->Txn(compares, writes);
    if (!changed.ok() || !*changed) continue;
    LogEvent(step == core::MoveStep::kRollBack ? spdlog::level::warn : spdlog::level::info, done,
             {{"shard", absl::StrCat(s)}, {"from", absl::StrCat(from)}, {"to", absl::StrCat(to)}});
    // Taken at once rather than at the next read.
    ReadLeadership();
  }
}

void Replicator::HandOff(absl::Duration timeout) {
  handing_off_ = true;
  const absl::Time deadline = absl::Now() + timeout;
  for (auto& shard : shards_) {
    if (shard->replica) HandOffShard(shard.get(), -1, deadline, "stopping");
  }
}

bool Replicator::HandOffShard(Shard* shard, int32_t to, absl::Time deadline,
                              absl::string_view why) {
  const uint32_t s = shard->index;
  int32_t target = -1;
  uint64_t epoch;
  {
    absl::MutexLock lock(&shard->mu);
    if (!shard->leading) return false;
    // New calls answer UNAVAILABLE from now on, and clients retry.
    shard->serving = false;
    epoch = shard->lead_epoch;
    auto caught_up = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard->mu) {
      if (!shard->leading) return true;
      const uint64_t last = log_->Last(s).seq;
      for (const auto& [node, peer] : shard->peers) {
        // Only a voter can be elected: a learner is skipped.
        if (peer.match_seq >= last && Holds(shard->voters, node) &&
            (to < 0 || static_cast<int32_t>(node) == to)) {
          target = static_cast<int32_t>(node);
          return true;
        }
      }
      return false;
    };
    shard->mu.AwaitWithDeadline(absl::Condition(&caught_up), deadline);
    if (!shard->leading) return false;
    if (target < 0 && to >= 0) {
      // The preferred node did not catch up: keep leading.
      shard->serving = true;
      return false;
    }
    StepDown(shard,
             target >= 0 ? absl::StrCat(why, ": handed to node ", target) : std::string(why));
    if (target >= 0) {
      // Until this node reads the handoff key back, it would contend for
      // the shard as if nobody had been named: as the shard's first voter,
      // at once, and it would win it back from its own target.
      shard->handoff_to = target;
      shard->next_election = std::max(shard->next_election, absl::Now() + options_.lease_ttl / 2);
    }
  }
  const std::string key = Key(absl::StrCat("leader/", s));
  std::vector<EtcdWrite> writes = {{key, "", 0, true}};
  if (target >= 0) {
    writes.push_back({Key(absl::StrCat("handoff/", s)), absl::StrCat(target), 0, false});
  }
  etcd_->Txn({{key, 0, absl::StrCat(options_.self, " ", epoch)}}, writes).IgnoreError();
  return target >= 0;
}

void Replicator::BalanceLeaders() {
  // One shard per pass at most, so that moving leadership back never
  // takes many shards away at once.
  const absl::Time now = absl::Now();
  for (auto& shard : shards_) {
    if (!shard->replica) continue;
    uint32_t home;
    {
      absl::MutexLock lock(&shard->mu);
      if (!shard->leading || !shard->serving || shard->voters.empty() ||
          shard->move.revision != 0) {
        continue;
      }
      home = shard->voters.front();
      if (home == options_.self) continue;
      auto it = shard->peers.find(home);
      if (it == shard->peers.end()) continue;
      // The home node must have answered steadily for a whole lease.
      if (now - it->second.last_heard > Tick(options_.lease_ttl) * 2 ||
          now - shard->leading_since < options_.lease_ttl ||
          it->second.live_since == absl::InfiniteFuture() ||
          now - it->second.live_since < options_.lease_ttl) {
        continue;
      }
    }
    HandOffShard(shard.get(), static_cast<int32_t>(home), now + Tick(options_.lease_ttl),
                 "its first replica is back");
    return;
  }
}

void Replicator::Stop() {
  if (stopped_.exchange(true)) return;
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  KickShippers();
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    StepDown(shard.get(), "stopping");
  }
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  // The election workers wait on elect_mu_: a release makes them look at
  // stopped_ again. The scanner that starts them has ended.
  std::vector<std::thread> electors;
  {
    absl::MutexLock lock(&elect_mu_);
    electors.swap(electors_);
  }
  for (std::thread& thread : electors) thread.join();
  // The coordinating thread, which starts shippers, has ended.
  std::vector<std::thread> shippers;
  {
    absl::MutexLock lock(&shippers_mu_);
    shippers.swap(shippers_);
  }
  for (std::thread& thread : shippers) thread.join();
  if (const int64_t id = lease_id_.exchange(0); id != 0) {
    // Ends this node's leader keys now: the other replicas need not wait
    // for the lease to run out.
    etcd_->RevokeLease(id).IgnoreError();
  }
}

void Replicator::FillTopology(v1::TopologyResponse* response) {
  response->set_replication_factor(options_.replication_factor);
  {
    // Every node this one knows, where clients reach it: the static list
    // of the flags, grown by the nodes that joined since.
    absl::MutexLock lock(&nodes_mu_);
    response->clear_nodes();
    for (const std::string& address : addresses_) response->add_nodes(address);
    for (uint32_t node : live_) response->add_live_nodes(node);
    for (uint32_t node : draining_) response->add_draining_nodes(node);
    response->set_placement_revision(static_cast<uint64_t>(placement_revision_));
  }
  uint64_t version = response->placement_revision();
  for (const ShardView& view : Views()) {
    v1::ShardLeader* out = response->add_leaders();
    out->set_shard(view.shard);
    out->set_leader(view.leader);
    out->set_epoch(view.epoch);
    for (uint32_t node : view.voters) out->add_voters(node);
    for (uint32_t node : view.learners) out->add_learners(node);
    if (view.move_to >= 0) {
      v1::ShardMove* move = out->mutable_move();
      move->set_from(static_cast<uint32_t>(view.move_from));
      move->set_to(static_cast<uint32_t>(view.move_to));
      move->set_state(view.move_state);
      if (view.leading) {
        move->set_progress_known(true);
        move->set_copied_bytes(view.move_copied_bytes);
        move->set_behind(view.move_behind);
      }
    }
    version = version * 1000003 + view.epoch * 31 + static_cast<uint64_t>(view.leader + 1);
    if (!view.leading) continue;
    v1::ReplicaStatus* self = out->add_replicas();
    self->set_node(options_.self);
    self->set_last_epoch(view.last.epoch);
    self->set_last_seq(view.last.seq);
    self->set_applied_seq(view.applied.seq);
    self->set_live(true);
    for (const ShardView::Follower& f : view.followers) {
      v1::ReplicaStatus* r = out->add_replicas();
      r->set_node(f.node);
      r->set_last_seq(f.match_seq);
      r->set_applied_seq(f.applied_seq);
      r->set_behind(view.last.seq > f.match_seq ? view.last.seq - f.match_seq : 0);
      r->set_live(f.live);
    }
  }
  response->set_version(response->version() ^ version);
}

std::vector<ShardView> Replicator::Views() {
  std::vector<ShardView> views;
  const absl::Time now = absl::Now();
  const absl::Duration live_window = options_.lease_ttl / 2;
  for (auto& shard_ptr : shards_) {
    Shard& shard = *shard_ptr;
    ShardView view;
    view.shard = shard.index;
    view.replica = shard.replica;
    if (shard.replica) {
      view.last = log_->Last(shard.index);
      view.applied = log_->Applied(shard.index);
    }
    absl::MutexLock lock(&shard.mu);
    view.leader = shard.leader;
    view.epoch = shard.epoch;
    view.leading = shard.leading && shard.serving;
    view.learner = shard.learner;
    view.commit_seq = shard.commit_seq;
    view.voters = shard.voters;
    view.learners = shard.learners;
    if (shard.move.revision != 0) {
      view.move_from = shard.move.from;
      view.move_to = shard.move.to;
      view.move_state = shard.move.state;
      if (auto it = shard.peers.find(static_cast<uint32_t>(shard.move.to));
          it != shard.peers.end()) {
        view.move_copied_bytes = it->second.sent_bytes;
        view.move_behind =
            view.last.seq > it->second.match_seq ? view.last.seq - it->second.match_seq : 0;
      }
    }
    if (shard.leader < 0 && shard.leaderless_since != absl::InfiniteFuture()) {
      view.without_leader = now - shard.leaderless_since;
    }
    if (view.leading) {
      for (const auto& [node, peer] : shard.peers) {
        view.followers.push_back(
            {node, peer.match_seq, peer.applied_seq, now - peer.last_heard < live_window});
      }
    }
    views.push_back(std::move(view));
  }
  return views;
}

void Replicator::CountShipped(uint32_t peer, size_t entries) {
  absl::MutexLock lock(&shipped_mu_);
  ShipCounters& counters = shipped_[peer];
  ++counters.calls;
  counters.entries += entries;
}

ReplicatorCounters Replicator::Counters() const {
  ReplicatorCounters counters{
      leader_changes_.load(), fenced_appends_.load(), elections_lost_.load(), {}};
  absl::MutexLock lock(&shipped_mu_);
  counters.shipped = shipped_;
  return counters;
}

}  // namespace dedup::server::cluster
