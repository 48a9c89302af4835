// The Replicator (replicator.h): joining the cluster, the etcd lease,
// the coordinating loop, stopping, and what the node reports.

#include "server/cluster/replicator.h"

#include "server/cluster/cluster_channel.h"
#include "server/cluster/replicator_internal.h"

namespace dedup::server::cluster {

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

  // The node's own loops, each on a named thread; Stop joins them.
  const std::pair<const char*, void (Replicator::*)()> loops[] = {
      {"etcd-lease", &Replicator::LeaseLoop},
      {"coordinate", &Replicator::CoordinateLoop},
      {"elections", &Replicator::ElectionLoop},
      {"commit-sweep", &Replicator::CommitSweepLoop},
      {"release-keys", &Replicator::ReleaseKeysLoop},
      {"log-sync", &Replicator::LogSyncLoop},
  };
  for (const auto& [name, loop] : loops) {
    r->threads_.emplace_back([p = r.get(), name = name, loop = loop] {
      storage::NameThisThread(name);
      (p->*loop)();
    });
  }
  r->EnsureShippers();
  return r;
}

std::string Replicator::Address(uint32_t node) {
  absl::MutexLock lock(&nodes_mu_);
  return node < addresses_.size() ? addresses_[node] : "";
}

std::shared_ptr<rv1::Replication::Stub> Replicator::PeerStub(uint32_t node) {
  absl::MutexLock lock(&nodes_mu_);
  auto it = stubs_.find(node);
  if (it != stubs_.end()) return it->second;
  if (node >= addresses_.size() || addresses_[node].empty()) return nullptr;
  std::shared_ptr<grpc::ChannelCredentials> credentials = options_.peer_credentials != nullptr
                                                              ? options_.peer_credentials
                                                              : grpc::InsecureChannelCredentials();
  std::shared_ptr<rv1::Replication::Stub> stub =
      rv1::Replication::NewStub(ClusterChannel(addresses_[node], credentials));
  stubs_[node] = stub;
  return stub;
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
  // created (core::InitialVoters): the same as before placement lived in
  // etcd, so a cluster from then keeps its data where it is. Each key only if absent, so
  // that the first node to start decides and nobody overwrites a move.
  // The absent keys go in transactions of kPlacementKeysPerTxn, so that a
  // new cluster of 1,024 shards costs etcd 16 round trips, not 1,024: they
  // add up on a slow link.
  std::vector<uint32_t> absent;
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    if (!has[s]) absent.push_back(s);
  }
  if (absent.empty()) return absl::OkStatus();
  // Over the zones the nodes registered (core::InitialVoters): without
  // any, shard s on nodes s..s+R-1.
  absl::StatusOr<std::vector<std::string>> zones = ReadZones();
  if (!zones.ok()) return zones.status();
  const absl::Time zones_deadline = absl::Now() + options_.lease_ttl * 3;
  auto unknown = [&]() {
    std::vector<std::string> nodes;
    for (size_t i = 0; i < zones->size(); ++i) {
      if ((*zones)[i].empty()) nodes.push_back(absl::StrCat(i));
    }
    return nodes;
  };
  if (!options_.zone.empty() && absent.size() == shards_.size()) {
    // A new cluster of nodes that give zones: the placement needs all of
    // them, and the nodes start at about the same time.
    while (!unknown().empty() && absl::Now() < zones_deadline && !stopped_.load()) {
      absl::SleepFor(absl::Milliseconds(200));
      zones = ReadZones();
      if (!zones.ok()) return zones.status();
    }
    if (!unknown().empty()) {
      LogEvent(spdlog::level::warn,
               "placing the new cluster's shards without the zones of nodes that have not "
               "registered one; once they have, `dedupctl cluster rebalance` moves replicas "
               "into distinct zones",
               {{"nodes", absl::StrJoin(unknown(), ",")}});
    }
  }
  std::set<std::string> distinct(zones->begin(), zones->end());
  if (!options_.zone.empty() && distinct.size() < options_.replication_factor) {
    LogEvent(spdlog::level::warn,
             "fewer zones than replicas of a shard: the loss of one zone can take a majority of "
             "some shards' replicas with it",
             {{"zones", absl::StrCat(distinct.size())},
              {"replication_factor", absl::StrCat(options_.replication_factor)}});
  } else if (!options_.zone.empty()) {
    LogEvent(spdlog::level::info, "placing every shard's replicas in distinct zones",
             {{"zones", absl::StrCat(distinct.size())}});
  }
  auto initial = [&](uint32_t s) {
    return EtcdWrite{
        Key(absl::StrCat("placement/", s)),
        PlacementValue(core::InitialVoters(s, options_.replication_factor, *zones), {}), 0, false};
  };
  // A transaction that finds a key written meanwhile means another node
  // is writing the placement too: the keys still absent are read again
  // (one round trip) and only those written, so that a node far from etcd
  // does not spend a round trip per shard on keys a nearer one wrote.
  while (!absent.empty()) {
    const size_t end = std::min(absent.size(), kPlacementKeysPerTxn);
    std::vector<EtcdCompare> compares;
    std::vector<EtcdWrite> writes;
    for (size_t i = 0; i < end; ++i) {
      writes.push_back(initial(absent[i]));
      compares.push_back({writes.back().key, 0, std::nullopt});
    }
    absl::StatusOr<bool> put = etcd_->Txn(compares, writes);
    if (!put.ok()) return put.status();
    if (*put) {
      absent.erase(absent.begin(), absent.begin() + end);
      continue;
    }
    placed = etcd_->GetPrefix(Key("placement/"));
    if (!placed.ok()) return placed.status();
    std::fill(has.begin(), has.end(), false);
    for (const EtcdKeyValue& kv : *placed) {
      uint32_t s;
      if (absl::SimpleAtoi(kv.key.substr(kv.key.rfind('/') + 1), &s) && s < has.size()) {
        has[s] = true;
      }
    }
    // Placement keys are never deleted, so each pass leaves fewer.
    absent.erase(std::remove_if(absent.begin(), absent.end(), [&](uint32_t s) { return has[s]; }),
                 absent.end());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Replicator::ReadZones() {
  absl::StatusOr<std::vector<EtcdKeyValue>> registered = etcd_->GetPrefix(Key("zones/"));
  if (!registered.ok()) return registered.status();
  std::vector<std::string> zones(options_.nodes.size());
  for (const EtcdKeyValue& kv : *registered) {
    uint32_t node;
    if (absl::SimpleAtoi(kv.key.substr(kv.key.rfind('/') + 1), &node) && node < zones.size()) {
      zones[node] = kv.value;
    }
  }
  return zones;
}

Replicator::~Replicator() { Stop(); }

std::string Replicator::Key(absl::string_view suffix) const {
  return absl::StrCat(options_.etcd_prefix, suffix);
}

bool Replicator::LeaseValid() const { return SteadyNowNs() < lease_valid_until_ns_.load(); }

absl::Status Replicator::Join() {
  // This node's zone, for placement: "" clears one given before.
  absl::StatusOr<int64_t> zoned =
      etcd_->Put(Key(absl::StrCat("zones/", options_.self)), options_.zone);
  if (!zoned.ok()) return zoned.status();
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
    // It may have acknowledged a leader just before it went down, and
    // that leader may still answer reads on its word (core::Stickiness).
    const uint64_t promised = log_->Promised(shard->index);
    if (shard->replica && promised > 0) {
      shard->heard_leader = -2;
      shard->heard_epoch = promised;
      shard->heard_ns = SteadyNowNs();
    }
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

void Replicator::LeaseLoop() {
  // A thread of its own: renewals that waited behind the coordinating
  // loop's etcd calls, which each wait out their deadline while etcd is
  // out of reach, let the lease run out on a node that etcd still
  // answers, and left a node that etcd no longer answers leading (and
  // sending heartbeats that keep its followers from electing) long after.
  const absl::Duration tick = Tick(options_.lease_ttl);
  int64_t last_renewal = SteadyNowNs();
  absl::Time last_warning = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&stop_mu_);
      if (stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) return;
    }
    const int64_t now = SteadyNowNs();
    if (now - last_renewal < absl::ToInt64Nanoseconds(options_.lease_ttl / 4) &&
        lease_id_.load() != 0) {
      continue;
    }
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
    StepDownWithoutLease();
  }
}

void Replicator::CoordinateLoop() {
  const absl::Duration tick = Tick(options_.lease_ttl);
  // While this node leads a shard that is moving, or a move names it, a
  // pass comes thrice as often: each step of a move (the target's learning
  // that it holds the shard, promote, hand off, remove) waits for one, and
  // a new node takes hundreds of small moves.
  const absl::Duration moving_tick = MovingTick(options_.lease_ttl);
  bool moving = false;
  absl::Time balanced_at = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&stop_mu_);
      if (stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), moving ? moving_tick : tick)) {
        return;
      }
    }
    StepDownWithoutLease();
    StepDownWithoutMajority();
    ReadLeadership();
    EnsureShippers();
    ClearCaughtUpLearners();
    TrimLogs();
    moving = AdvanceMoves() || named_in_move_.load();
    // Hand-backs at most once a tick, however often the passes come: its
    // budget of shards per pass is a pace.
    if (!handing_off_.load() && absl::Now() - balanced_at >= tick) {
      balanced_at = absl::Now();
      BalanceLeaders();
    }
  }
}

absl::Status Replicator::CheckLeading(uint32_t s) {
  Shard& shard = *shards_[s];
  absl::MutexLock lock(&shard.mu);
  const bool leased =
      shard.leading && shard.serving && LeaseValid() && shard.lead_lease == lease_id_.load();
  if (leased && ReadLeaseValid(shard)) return absl::OkStatus();
  if (leased) {
    return absl::UnavailableError(absl::StrCat(
        "shard ", s, ": no majority of its replicas has answered this node lately; retry"));
  }
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
  SweepCommitsSoon();
  {
    absl::MutexLock lock(&sweep_mu_);
    release_stopping_ = true;
  }
  {
    absl::MutexLock lock(&log_sync_mu_);
    log_sync_stopping_ = true;
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
    response->clear_zones();
    for (size_t node = 0; node < addresses_.size(); ++node) {
      response->add_zones(node < zones_.size() ? zones_[node] : "");
    }
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

void Replicator::HeardFrom(uint32_t peer) {
  absl::MutexLock lock(&heard_mu_);
  heard_[peer] = absl::Now();
}

void Replicator::CountShipped(uint32_t peer, size_t entries, size_t bytes, size_t entry_bytes) {
  absl::MutexLock lock(&shipped_mu_);
  ShipCounters& counters = shipped_[peer];
  ++counters.calls;
  counters.entries += entries;
  counters.bytes += bytes;
  counters.entry_bytes += entry_bytes;
}

ReplicatorCounters Replicator::Counters() const {
  ReplicatorCounters counters;
  counters.leader_changes = leader_changes_.load();
  counters.fenced_appends = fenced_appends_.load();
  counters.elections_lost = elections_lost_.load();
  counters.handoff_notices_sent = handoff_notices_sent_.load();
  counters.handoff_notices_stood = handoff_notices_stood_.load();
  absl::MutexLock lock(&shipped_mu_);
  counters.shipped = shipped_;
  return counters;
}

}  // namespace dedup::server::cluster
