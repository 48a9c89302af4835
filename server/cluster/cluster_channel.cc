#include "server/cluster/cluster_channel.h"

namespace dedup::server::cluster {

std::shared_ptr<grpc::Channel> ClusterChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                   static_cast<int>(absl::ToInt64Milliseconds(kInitialReconnectBackoff)));
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                   static_cast<int>(absl::ToInt64Milliseconds(kMaxReconnectBackoff)));
  // gRPC's name for the time one attempt to connect may take.
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                   static_cast<int>(absl::ToInt64Milliseconds(kConnectTimeout)));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                   static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTime)));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                   static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTimeout)));
  // Pings only while calls are out, as etcd requires; a node's shipping
  // streams to its peers are always out.
  arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  return grpc::CreateCustomChannel(target, credentials, arguments);
}

}  // namespace dedup::server::cluster
