#include "tests/blackbox/dedup_client.h"

#include <stdlib.h>

#include <utility>

#include "grpcpp/client_context.h"

namespace dedup::blackbox {
namespace {

// A draining dedupd waits until each connected client acknowledges the ping
// of its graceful GOAWAY (or until its shutdown grace ends). A synchronous
// C++ client with no call in progress reads its socket only from gRPC's
// backup poller, every 5 s by default, which would make every SIGTERM in
// these tests take 5 s. Set before main, hence before gRPC reads it; a value
// already in the environment wins.
const bool kPollIdleChannelsOften = [] {
  setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "50", /*overwrite=*/0);
  return true;
}();

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + DedupClient::kCallTimeout);
}

}  // namespace

DedupClient::DedupClient(std::shared_ptr<grpc::Channel> channel)
    : stub_(v1::Dedup::NewStub(std::move(channel))) {}

grpc::Status DedupClient::Claim(const std::string& ns, const std::string& key,
                                const std::string& owner, std::optional<uint64_t> lease_ms,
                                v1::ClaimResponse* response) {
  v1::ClaimRequest request;
  request.set_namespace_(ns);
  request.set_key(key);
  request.set_owner(owner);
  if (lease_ms.has_value()) request.set_lease_ms(*lease_ms);
  grpc::ClientContext context;
  SetDeadline(&context);
  return stub_->Claim(&context, request, response);
}

grpc::Status DedupClient::Complete(const std::string& ns, const std::string& key, uint64_t token,
                                   const std::string& result, v1::CompleteResponse* response) {
  v1::CompleteRequest request;
  request.set_namespace_(ns);
  request.set_key(key);
  request.set_token(token);
  request.set_result(result);
  grpc::ClientContext context;
  SetDeadline(&context);
  return stub_->Complete(&context, request, response);
}

grpc::Status DedupClient::Query(const std::string& ns, const std::string& key, v1::Record* record) {
  v1::QueryRequest request;
  request.set_namespace_(ns);
  request.set_key(key);
  v1::QueryResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::Status status = stub_->Query(&context, request, &response);
  if (status.ok()) *record = response.record();
  return status;
}

}  // namespace dedup::blackbox
