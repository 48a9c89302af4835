#include "dedupd_driver.h"

#include <future>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dedup/client/grpc_status.h"
#include "grpcpp/create_channel.h"

namespace dedup::bench {
namespace {

using client::Client;
using client::ClientOptions;
using client::FromGrpc;

const char* ApiName(DedupdApi api) {
  switch (api) {
    case DedupdApi::kClient:
      return "client library, coalescing onto Stream batches";
    case DedupdApi::kUnary:
      return "client library, one unary RPC per claim";
    case DedupdApi::kBatch:
      return "Batch RPC per request";
  }
  return "?";
}

// The requests every dedupd session sends.
class Requests {
 public:
  Requests(const Workload& workload, int caller)
      : workload_(workload),
        owner_(absl::StrCat("bench-", caller)),
        result_(workload.result_bytes, 'r') {}

  v1::ClaimRequest Claim(const std::string& key) const {
    v1::ClaimRequest request;
    request.set_namespace_(workload_.ns);
    request.set_key(key);
    request.set_owner(owner_);
    request.set_lease_ms(workload_.lease_ms);
    return request;
  }

  v1::CompleteRequest Complete(const std::string& key, uint64_t token) const {
    v1::CompleteRequest request;
    request.set_namespace_(workload_.ns);
    request.set_key(key);
    request.set_token(token);
    request.set_result(result_);
    if (workload_.retention_ms > 0) request.set_retention_ms(workload_.retention_ms);
    return request;
  }

  bool completes() const { return workload_.complete; }

 private:
  const Workload& workload_;
  const std::string owner_;
  const std::string result_;
};

void Count(const v1::ClaimResponse& response, ClaimTally* tally) {
  if (response.outcome() == v1::ClaimResponse::ACQUIRED) {
    ++tally->acquired;
  } else {
    ++tally->duplicate;
  }
}

// Through the client library (coalescing or unary).
class ClientSession final : public Session {
 public:
  ClientSession(Client* client, const Workload& workload, int caller)
      : client_(client), requests_(workload, caller) {}

  absl::Status ClaimBatch(const std::vector<std::string>& keys, ClaimTally* tally) override {
    if (keys.size() == 1) return ClaimOne(keys[0], tally);
    std::vector<std::future<absl::StatusOr<v1::ClaimResponse>>> claims;
    claims.reserve(keys.size());
    for (const auto& key : keys) claims.push_back(client_->ClaimFuture(requests_.Claim(key)));
    std::vector<std::future<absl::StatusOr<v1::CompleteResponse>>> completes;
    for (size_t i = 0; i < keys.size(); ++i) {
      absl::StatusOr<v1::ClaimResponse> response = claims[i].get();
      if (!response.ok()) {
        ++tally->errors;
        continue;
      }
      Count(*response, tally);
      if (requests_.completes() && response->outcome() == v1::ClaimResponse::ACQUIRED) {
        completes.push_back(
            client_->CompleteFuture(requests_.Complete(keys[i], response->token())));
      }
    }
    for (auto& complete : completes) {
      if (!complete.get().ok()) ++tally->errors;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status ClaimOne(const std::string& key, ClaimTally* tally) {
    absl::StatusOr<v1::ClaimResponse> response = client_->Claim(requests_.Claim(key));
    if (!response.ok()) return response.status();
    Count(*response, tally);
    if (requests_.completes() && response->outcome() == v1::ClaimResponse::ACQUIRED) {
      absl::StatusOr<v1::CompleteResponse> done =
          client_->Complete(requests_.Complete(key, response->token()));
      if (!done.ok()) ++tally->errors;
    }
    return absl::OkStatus();
  }

  Client* const client_;
  const Requests requests_;
};

// Through the client library's callback API: each slot is an owner of its
// own, as each caller is in ClientSession, and a claim's Complete is sent
// from the claim's callback.
class ClientAsyncSession final : public AsyncSession {
 public:
  ClientAsyncSession(Client* client, const Workload& workload, int slots) : client_(client) {
    requests_.reserve(slots);
    for (int slot = 0; slot < slots; ++slot) requests_.emplace_back(workload, slot);
  }

  void Claim(int slot, const std::string& key, ClaimDone done) override {
    const Requests* requests = &requests_[slot];
    auto claimed = [client = client_, requests, key,
                    done = std::move(done)](absl::StatusOr<v1::ClaimResponse> response) {
      if (!response.ok()) return done(response.status(), ClaimTally{});
      ClaimTally tally;
      Count(*response, &tally);
      if (!requests->completes() || response->outcome() != v1::ClaimResponse::ACQUIRED) {
        return done(absl::OkStatus(), tally);
      }
      auto completed = [tally, done](absl::StatusOr<v1::CompleteResponse> answer) mutable {
        if (!answer.ok()) ++tally.errors;
        done(absl::OkStatus(), tally);
      };
      client->CompleteAsync(requests->Complete(key, response->token()), std::move(completed));
    };
    client_->ClaimAsync(requests->Claim(key), std::move(claimed));
  }

 private:
  Client* const client_;
  std::vector<Requests> requests_;  // One per slot.
};

// One Batch RPC per request through the generated stub.
class BatchSession final : public Session {
 public:
  BatchSession(v1::Dedup::Stub* stub, const Workload& workload, int caller, absl::Duration timeout,
               std::string bearer_token)
      : stub_(stub),
        requests_(workload, caller),
        timeout_(timeout),
        bearer_token_(std::move(bearer_token)) {}

  absl::Status ClaimBatch(const std::vector<std::string>& keys, ClaimTally* tally) override {
    v1::BatchRequest claims;
    for (const auto& key : keys) *claims.add_operations()->mutable_claim() = requests_.Claim(key);
    v1::BatchResponse answers;
    if (absl::Status s = Call(claims, &answers); !s.ok()) return s;
    v1::BatchRequest completes;
    for (int i = 0; i < answers.results_size(); ++i) {
      const v1::OperationResult& result = answers.results(i);
      if (!result.has_claim()) {
        ++tally->errors;
        continue;
      }
      Count(result.claim(), tally);
      if (requests_.completes() && result.claim().outcome() == v1::ClaimResponse::ACQUIRED) {
        *completes.add_operations()->mutable_complete() =
            requests_.Complete(keys[i], result.claim().token());
      }
    }
    if (completes.operations_size() == 0) return absl::OkStatus();
    v1::BatchResponse completed;
    if (absl::Status s = Call(completes, &completed); !s.ok()) return s;
    for (const auto& result : completed.results()) {
      if (!result.has_complete()) ++tally->errors;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Call(const v1::BatchRequest& request, v1::BatchResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    if (!bearer_token_.empty()) context.AddMetadata("authorization", "Bearer " + bearer_token_);
    return FromGrpc(stub_->Batch(&context, request, response));
  }

  v1::Dedup::Stub* const stub_;
  const Requests requests_;
  const absl::Duration timeout_;
  const std::string bearer_token_;
};

class DedupdDriver final : public Driver {
 public:
  DedupdDriver(const DedupdDriverOptions& options, const Workload& workload)
      : options_(options), workload_(workload) {}

  std::string Describe() const override {
    return absl::StrCat("dedupd at ", options_.target, " (", ApiName(options_.api), ")");
  }

  absl::Status Prepare() override {
    if (options_.api == DedupdApi::kBatch) {
      channel_ = grpc::CreateChannel(options_.target, grpc::InsecureChannelCredentials());
      stub_ = v1::Dedup::NewStub(channel_);
    }
    ClientOptions client_options;
    client_options.endpoint = options_.target;
    client_options.default_timeout = options_.timeout;
    client_options.coalesce = options_.api == DedupdApi::kClient;
    client_options.batch_window = options_.batch_window;
    client_options.max_batch = options_.max_batch;
    client_options.max_batches_in_flight = options_.max_batches_in_flight;
    client_options.completed_cache_entries = options_.completed_cache_entries;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(client_options);
    if (!client.ok()) return client.status();
    client_ = *std::move(client);
    client::CallOptions wait;
    wait.deadline = absl::Now() + absl::Seconds(10);
    if (absl::Status health = client_->Health(wait); !health.ok()) {
      return absl::UnavailableError(
          absl::StrCat("dedupd at ", options_.target, " is not serving: ", health.ToString()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Session>> NewSession(int caller) override {
    if (options_.api == DedupdApi::kBatch) {
      return std::make_unique<BatchSession>(stub_.get(), workload_, caller, options_.timeout,
                                            options_.bearer_token);
    }
    return std::make_unique<ClientSession>(client_.get(), workload_, caller);
  }

  absl::StatusOr<std::unique_ptr<AsyncSession>> NewAsyncSession(int slots) override {
    if (options_.api == DedupdApi::kBatch) {
      return absl::UnimplementedError("the asynchronous mode needs the client library, not Batch");
    }
    return std::make_unique<ClientAsyncSession>(client_.get(), workload_, slots);
  }

 private:
  const DedupdDriverOptions options_;
  const Workload workload_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Dedup::Stub> stub_;
};

}  // namespace

std::unique_ptr<Driver> MakeDedupdDriver(const DedupdDriverOptions& options,
                                         const Workload& workload) {
  return std::make_unique<DedupdDriver>(options, workload);
}

}  // namespace dedup::bench
