#ifndef DEDUP_SERVER_CLUSTER_PEER_SHIPPER_H_
#define DEDUP_SERVER_CLUSTER_PEER_SHIPPER_H_

// How a leader's rounds of appends reach one follower (docs/replication.md
// §4): on one ShipStream kept open from round to round, so that a round
// costs a message each way and no call set-up; or, to a peer that does not
// serve ShipStream (a node from before it, in a rolling upgrade), a Ship
// call per round.
//
// A round's outcome is what a Ship call's would be: the answer, or an
// error after which the leader does not know whether the follower appended
// (the protocol sends again from what the follower last confirmed). A
// stream that fails or runs past a round's deadline is cancelled and a new
// one opened with the next round.
//
// Used by one thread at a time (the leader's shipping loop for the peer).

#include <memory>

#include "absl/time/time.h"
#include "dedup/replication/v1/replication.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dedup::server::cluster {

class PeerShipper {
 public:
  using Stub = replication::v1::Replication::Stub;

  PeerShipper() = default;
  ~PeerShipper();
  PeerShipper(const PeerShipper&) = delete;
  PeerShipper& operator=(const PeerShipper&) = delete;

  // One round to the peer behind `stub`: its answer in `*response`, or
  // the failure: the peer's own status (UNIMPLEMENTED when it serves
  // neither ShipStream nor Ship), DEADLINE_EXCEEDED when no answer came
  // by `deadline`, UNAVAILABLE when the stream broke. A `stub` other than
  // the last round's (the peer's address changed) gets a stream of its own.
  grpc::Status Ship(const std::shared_ptr<Stub>& stub, const replication::v1::ShipRequest& request,
                    replication::v1::ShipResponse* response, absl::Time deadline);

  // True while rounds go on a ShipStream; false for the minute after the
  // peer answered that it does not serve one, when rounds are Ship calls.
  bool streaming() const { return absl::Now() >= calls_until_; }

  // How long rounds stay Ship calls after a peer lacked ShipStream, before
  // a stream is tried again (the peer may have been upgraded meanwhile).
  static constexpr absl::Duration kCallsAfterUnimplemented = absl::Minutes(1);

 private:
  enum class Wait { kDone, kFailed, kTimedOut };

  grpc::Status Call(Stub* stub, const replication::v1::ShipRequest& request,
                    replication::v1::ShipResponse* response, absl::Time deadline);
  // The stream's next completion, until `deadline`.
  Wait Await(absl::Time deadline);
  // Ends the stream: after a failed operation, its status from the peer;
  // after a timeout (`cancel`), once it is cancelled. Either way the stream
  // is gone and the next round opens another.
  grpc::Status End(bool cancel, absl::Time deadline);

  std::shared_ptr<Stub> stub_;  // What the open stream runs on.
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<
      grpc::ClientAsyncReaderWriter<replication::v1::ShipRequest, replication::v1::ShipResponse>>
      stream_;
  grpc::CompletionQueue queue_;
  bool pending_ = false;  // An operation of the stream has yet to complete.
  absl::Time calls_until_ = absl::InfinitePast();
};

}  // namespace dedup::server::cluster

#endif  // DEDUP_SERVER_CLUSTER_PEER_SHIPPER_H_
