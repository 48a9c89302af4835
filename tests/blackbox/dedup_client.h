#ifndef DEDUP_TESTS_BLACKBOX_DEDUP_CLIENT_H_
#define DEDUP_TESTS_BLACKBOX_DEDUP_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace dedup::blackbox {

// The few unary Dedup calls the black-box tests make. Each call is bounded
// by a deadline, so a server that died or hangs fails a test instead of
// hanging it.
//
// Thread-safe, like the gRPC stub underneath.
class DedupClient {
 public:
  static constexpr std::chrono::seconds kCallTimeout{5};

  explicit DedupClient(std::shared_ptr<grpc::Channel> channel);

  grpc::Status Claim(const std::string& ns, const std::string& key, const std::string& owner,
                     std::optional<uint64_t> lease_ms, v1::ClaimResponse* response);
  grpc::Status Complete(const std::string& ns, const std::string& key, uint64_t token,
                        const std::string& result, v1::CompleteResponse* response);
  // The record of `key` (state STATE_ABSENT when there is none).
  grpc::Status Query(const std::string& ns, const std::string& key, v1::Record* record);

 private:
  std::unique_ptr<v1::Dedup::Stub> stub_;
};

}  // namespace dedup::blackbox

#endif  // DEDUP_TESTS_BLACKBOX_DEDUP_CLIENT_H_
