#ifndef DEDUP_TESTS_CAMPAIGN_TARGET_H_
#define DEDUP_TESTS_CAMPAIGN_TARGET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/channel.h"
#include "storage/operation.h"
#include "storage/store.h"

namespace dedup::campaign {

// How a group of operations travels: one call each, one Batch, or one
// batch on a Stream.
enum class Mode { kUnary, kBatch, kStream };

const char* ModeName(Mode mode);

// One operation's answer as the client saw it. `answered` is false when
// the call failed (the server died, the disk is full, the power went): the
// operation may or may not have taken effect.
struct Answer {
  bool answered = false;
  storage::Outcome outcome = storage::Outcome::kAbsent;
  uint64_t token = 0;                              // Claim ACQUIRED or COMPLETED; Query COMPLETED.
  std::string result;                              // Claim COMPLETED; Query COMPLETED.
  storage::State state = storage::State::kAbsent;  // Query.
};

// Where the campaign's load goes: the dedupd binary over gRPC, or a Store
// in this process. Thread-safe.
class Target {
 public:
  virtual ~Target() = default;
  // Applies `ops` in order and answers each in the same position.
  virtual std::vector<Answer> Apply(const std::vector<storage::Operation>& ops, Mode mode) = 0;
};

// The dedupd binary, through the generated stub. Every call has a 5 s
// deadline.
class GrpcTarget final : public Target {
 public:
  explicit GrpcTarget(std::shared_ptr<grpc::Channel> channel);
  std::vector<Answer> Apply(const std::vector<storage::Operation>& ops, Mode mode) override;

 private:
  Answer Unary(const storage::Operation& op);
  std::vector<Answer> Batch(const v1::BatchRequest& request);
  std::vector<Answer> Stream(const v1::BatchRequest& request);

  std::unique_ptr<v1::Dedup::Stub> stub_;
};

// A Store in this process: kUnary applies each operation alone, kBatch and
// kStream apply them as one Store::Apply.
class StoreTarget final : public Target {
 public:
  explicit StoreTarget(storage::Store* store) : store_(store) {}
  std::vector<Answer> Apply(const std::vector<storage::Operation>& ops, Mode mode) override;

 private:
  storage::Store* const store_;
};

}  // namespace dedup::campaign

#endif  // DEDUP_TESTS_CAMPAIGN_TARGET_H_
