#ifndef DEDUP_TESTS_BLACKBOX_NETWORK_LAB_H_
#define DEDUP_TESTS_BLACKBOX_NETWORK_LAB_H_

// A private network for a replicated cluster, made of Linux network
// namespaces, so that a test can cut, half-cut and degrade the links
// between real processes the way a switch, a firewall or a congested
// cable does, which signals and 127.0.0.1 cannot.
//
//   hub namespace:   bridge br0, 10.77.0.1 (the test's own client) and
//                    10.77.0.2 (etcd, started from the hub)
//   node namespace i: eth0 10.77.0.(10 + i), a veth whose other end is on
//                    br0; dedupd node i runs inside it
//
// The test process itself moves into the hub (EnterHub), so its clients
// reach the nodes over the bridge, and every process it spawns starts
// there unless told to enter a node's namespace. Faults are nftables
// rules inside one node's namespace: they touch nothing outside the lab,
// and no packet ever leaves it. Needs root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN), `ip` (iproute2) and `nft` (nftables).
//
// The kernel may lack netem (sch_netem), so loss is made with nftables'
// random numbers, and delay by a proxy in the node's namespace that
// nftables sends the node's TCP connections through (delay_proxy.py).

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dedup::blackbox {

// Not thread-safe: drive it from the test's main thread.
class NetworkLab {
 public:
  // Makes the hub and `nodes` node namespaces (removing those a crashed
  // earlier run left behind). UNAVAILABLE, with the reason, when this
  // machine cannot make network namespaces (not root, no iproute2 or
  // nftables); any other error is a failure.
  static absl::StatusOr<std::unique_ptr<NetworkLab>> Create(int nodes);

  // Deletes every namespace of the lab. The processes in them must have
  // ended first.
  ~NetworkLab();

  NetworkLab(const NetworkLab&) = delete;
  NetworkLab& operator=(const NetworkLab&) = delete;

  // Moves the calling process into the hub. Call it before anything has
  // started a thread (gRPC starts its own with the first channel): a
  // thread keeps the namespace it had, and only threads started afterwards
  // inherit the hub.
  absl::Status EnterHub();

  // The port every node serves on, each at its own address.
  static constexpr int kNodePort = 7100;

  int nodes() const { return static_cast<int>(node_namespaces_.size()); }
  // The address node i listens on, without a port.
  std::string NodeHost(int node) const;
  // The address etcd listens on, in the hub.
  static std::string EtcdHost() { return "10.77.0.2"; }
  // The hub's own address, the test's clients'.
  static std::string HubHost() { return "10.77.0.1"; }
  // The namespace's name, for `ip netns exec` (DedupdProcess::Spawn).
  const std::string& NodeNamespace(int node) const { return node_namespaces_[node]; }

  // Faults, each replacing the node's previous one; Heal removes it.
  // Drops every packet between `node` and each of `peers`, both ways.
  absl::Status CutOff(int node, const std::vector<int>& peers);
  // Both: every packet between `node` and each of `peers`, and etcd, both
  // ways (a zone cut off from the rest, its own nodes still together).
  absl::Status CutOffWithEtcd(int node, const std::vector<int>& peers);
  // Drops the packets `node` sends to each of `peers`; theirs still reach it.
  absl::Status CutOffOutgoing(int node, const std::vector<int>& peers);
  // Drops every packet between `node` and etcd, both ways.
  absl::Status CutOffFromEtcd(int node);
  // Drops `percent` of the packets `node` sends, at random: with every
  // node losing, each packet between two nodes runs that risk once.
  absl::Status Lose(int node, int percent);
  absl::Status Heal(int node);

  // Holds back by `delay` every byte `node` sends over TCP, to anyone, for
  // the rest of the lab's life. Only connections
  // opened afterwards are delayed, so call it before the node starts.
  // Heal does not undo it.
  absl::Status Delay(int node, absl::Duration delay);
  // Like Delay, by the other end's address: what `node` sends to a host of
  // `by_host` (a node's, EtcdHost, the hub's 10.77.0.1) is held back by its
  // delay, anything else by `otherwise`. Regions: one call per node, each
  // delay half the round trip between two nodes' regions, since the other
  // node's own proxy delays the way back; the full round trip to the hub,
  // which delays nothing it sends.
  absl::Status DelayTo(int node, const std::map<std::string, absl::Duration>& by_host,
                       absl::Duration otherwise);

 private:
  NetworkLab(std::string prefix, std::vector<std::string> node_namespaces)
      : prefix_(std::move(prefix)), node_namespaces_(std::move(node_namespaces)) {}

  // Loads `rules` into the node's fault table, replacing what was there.
  absl::Status SetFault(int node, const std::string& rules);

  const std::string prefix_;
  const std::vector<std::string> node_namespaces_;
  std::vector<pid_t> proxies_;  // Of Delay; ended by the destructor.
};

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_NETWORK_LAB_H_
