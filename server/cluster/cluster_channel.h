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
// nothing, so these channels try at least once a second.

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace dedup::server::cluster {

// The first wait after a failed attempt to connect, and the longest.
inline constexpr absl::Duration kInitialReconnectBackoff = absl::Milliseconds(100);
inline constexpr absl::Duration kMaxReconnectBackoff = absl::Seconds(1);

// A channel to `target` ("host:port") with the reconnect back-off above.
std::shared_ptr<grpc::Channel> ClusterChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials);

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_CLUSTER_CHANNEL_H_
