#ifndef DEDUP_SERVER_CLUSTER_CLUSTER_CHANNEL_H_
#define DEDUP_SERVER_CLUSTER_CLUSTER_CHANNEL_H_

// Channels from a node to the other nodes of its cluster and to etcd.
//
// gRPC waits longer and longer between attempts to connect to an address
// that refuses, up to two minutes by default. A peer that was down for a
// minute would then be called again up to a minute after it was back:
// meanwhile its leaders send it nothing, so its shards have one live
// replica fewer than the cluster shows, and it is handed none of its
// shards back. Between the nodes of one cluster an attempt costs next to
// nothing, so these channels try at least once a second, and give up on
// an attempt whose handshake has not finished in a few seconds (a SYN
// lost to a partition would otherwise be resent only seconds later).
//
// A partition that drops packets leaves connections open but silent, and
// TCP backs off its resends of what they hold: after a minute cut off, a
// node's peers reached it again 49 to 51 s after the network healed. So
// these channels also ping the peer while calls are out, and close the
// connection when no answer comes (keepalive); the next call connects
// anew. The interval is the servers' least (limits.min_client_ping_interval
// of dedupd, 10 s; etcd asks for 5 s).

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace dedup::server::cluster {

// The first wait after a failed attempt to connect, and the longest.
inline constexpr absl::Duration kInitialReconnectBackoff = absl::Milliseconds(100);
inline constexpr absl::Duration kMaxReconnectBackoff = absl::Seconds(1);
// How long one attempt to connect may take.
inline constexpr absl::Duration kConnectTimeout = absl::Seconds(3);
// A ping after this long without one, and the connection closed when its
// answer has not come this long after.
inline constexpr absl::Duration kKeepaliveTime = absl::Seconds(10);
inline constexpr absl::Duration kKeepaliveTimeout = absl::Seconds(3);

// A channel to `target` ("host:port") with the settings above.
std::shared_ptr<grpc::Channel> ClusterChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials);

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_CLUSTER_CHANNEL_H_
