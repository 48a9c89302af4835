#ifndef DEDUP_TESTS_CLIENT_SCRIPTED_DEDUP_H_
#define DEDUP_TESTS_CLIENT_SCRIPTED_DEDUP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dedup::client::test {

// A Dedup server whose answers the test sets, on 127.0.0.1 port 0, for
// what a real one cannot be made to do on cue: the first
// `unavailable_claims` Claims (alone or in a Stream batch) are answered
// UNAVAILABLE, the later ones ACQUIRED with kToken; Topology answers
// `topology`. Other calls are UNIMPLEMENTED.
class ScriptedDedup final : public v1::Dedup::Service {
 public:
  static constexpr uint64_t kToken = 7;

  explicit ScriptedDedup(int unavailable_claims,
                         v1::TopologyResponse topology = v1::TopologyResponse());
  ~ScriptedDedup() override;

  // Empty if the server could not start.
  const std::string& address() const { return address_; }
  // Claims received so far.
  int claims() const { return claims_.load(); }

  grpc::Status Claim(grpc::ServerContext* context, const v1::ClaimRequest* request,
                     v1::ClaimResponse* response) override;
  grpc::Status Stream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::BatchResponse, v1::BatchRequest>* stream) override;
  grpc::Status Topology(grpc::ServerContext* context, const v1::TopologyRequest* request,
                        v1::TopologyResponse* response) override;

 private:
  // Counts a Claim and answers it by the script.
  grpc::Status NextClaim(v1::ClaimResponse* response);

  const int unavailable_claims_;
  const v1::TopologyResponse topology_;
  std::atomic<int> claims_{0};
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// Answers a Stream of claim batches until the client stops writing: each
// Claim through `claim` (its error as the item's), any other operation
// UNIMPLEMENTED. What the test servers share.
grpc::Status AnswerClaimStream(
    grpc::ServerReaderWriter<v1::BatchResponse, v1::BatchRequest>* stream,
    const std::function<grpc::Status(const v1::ClaimRequest&, v1::ClaimResponse*)>& claim);

}  // namespace dedup::client::test

#endif  // DEDUP_TESTS_CLIENT_SCRIPTED_DEDUP_H_
