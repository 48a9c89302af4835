#include "server/cluster/cluster_channel.h"

namespace dedup::server::cluster {

std::shared_ptr<grpc::Channel> ClusterChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                   static_cast<int>(absl::ToInt64Milliseconds(kInitialReconnectBackoff)));
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                   static_cast<int>(absl::ToInt64Milliseconds(kMaxReconnectBackoff)));
  return grpc::CreateCustomChannel(target, credentials, arguments);
}

}  // namespace dedup::server::cluster
