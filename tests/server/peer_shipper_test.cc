// PeerShipper (server/cluster/peer_shipper.h): a leader's rounds to one
// follower on one ShipStream, Ship calls to a peer without it, and a round
// that fails or runs past its deadline ending in a status, with the next
// round on a new stream.

#include "server/cluster/peer_shipper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"

namespace dedup::server::cluster {
namespace {

namespace rv1 = ::dedup::replication::v1;

rv1::ShipRequest Round(int appends) {
  rv1::ShipRequest request;
  for (int i = 0; i < appends; ++i) request.add_appends()->set_shard(static_cast<uint32_t>(i));
  return request;
}

// One answer per append, each naming its shard, as a follower's would.
rv1::ShipResponse Answer(const rv1::ShipRequest& request) {
  rv1::ShipResponse response;
  for (const rv1::AppendRequest& append : request.appends()) {
    response.add_results()->mutable_last()->set_seq(append.shard() + 100);
  }
  return response;
}

// A follower that serves Ship and, unless `streams` is false, ShipStream.
class FakeFollower final : public rv1::Replication::Service {
 public:
  explicit FakeFollower(bool streams) : streams_(streams) {}

  grpc::Status Ship(grpc::ServerContext*, const rv1::ShipRequest* request,
                    rv1::ShipResponse* response) override {
    ++calls;
    *response = Answer(*request);
    return grpc::Status::OK;
  }

  grpc::Status ShipStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<rv1::ShipResponse, rv1::ShipRequest>* stream) override {
    if (!streams_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
    ++streams_opened;
    rv1::ShipRequest request;
    while (stream->Read(&request)) {
      ++stream_messages;
      if (refuse.load())
        return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no replica role");
      if (hang.load()) {
        // Never answers this stream: the leader's deadline has to end it.
        while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
        return grpc::Status::CANCELLED;
      }
      if (!stream->Write(Answer(request))) break;
    }
    return grpc::Status::OK;
  }

  std::atomic<int> calls{0};
  std::atomic<int> streams_opened{0};
  std::atomic<int> stream_messages{0};
  std::atomic<bool> hang{false};
  std::atomic<bool> refuse{false};

 private:
  const bool streams_;
};

class PeerShipperTest : public ::testing::Test {
 protected:
  // A follower on 127.0.0.1, port 0, and a stub to it.
  std::shared_ptr<PeerShipper::Stub> Serve(grpc::Service* follower) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(follower);
    servers_.push_back(builder.BuildAndStart());
    EXPECT_GT(port, 0);
    return rv1::Replication::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    for (auto& server : servers_) server->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  static absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

  std::vector<std::unique_ptr<grpc::Server>> servers_;
};

TEST_F(PeerShipperTest, RoundsShareOneStream) {
  FakeFollower follower(/*streams=*/true);
  auto stub = Serve(&follower);
  PeerShipper shipper;
  for (int round = 1; round <= 5; ++round) {
    rv1::ShipResponse response;
    grpc::Status status = shipper.Ship(stub, Round(round), &response, Deadline());
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.results_size(), round);
    EXPECT_EQ(response.results(round - 1).last().seq(), static_cast<uint64_t>(round - 1 + 100));
  }
  EXPECT_TRUE(shipper.streaming());
  EXPECT_EQ(follower.streams_opened.load(), 1);
  EXPECT_EQ(follower.stream_messages.load(), 5);
  EXPECT_EQ(follower.calls.load(), 0);
}

TEST_F(PeerShipperTest, PeerWithoutShipStreamGetsShipCalls) {
  FakeFollower follower(/*streams=*/false);
  auto stub = Serve(&follower);
  PeerShipper shipper;
  for (int round = 1; round <= 3; ++round) {
    rv1::ShipResponse response;
    grpc::Status status = shipper.Ship(stub, Round(2), &response, Deadline());
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.results_size(), 2);
  }
  // The first round tried a stream; every round was then a call, the
  // first one included.
  EXPECT_FALSE(shipper.streaming());
  EXPECT_EQ(follower.calls.load(), 3);
  EXPECT_EQ(follower.stream_messages.load(), 0);
}

TEST_F(PeerShipperTest, PeerWithoutShipIsUnimplemented) {
  // A peer from before Ship: the shipping loop goes on to Append calls.
  class Bare final : public rv1::Replication::Service {};
  Bare bare;
  auto stub = Serve(&bare);
  PeerShipper shipper;
  rv1::ShipResponse response;
  EXPECT_EQ(shipper.Ship(std::move(stub), Round(1), &response, Deadline()).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(PeerShipperTest, RoundPastItsDeadlineFailsAndTheNextOpensAStream) {
  FakeFollower follower(/*streams=*/true);
  auto stub = Serve(&follower);
  PeerShipper shipper;
  rv1::ShipResponse response;
  ASSERT_TRUE(shipper.Ship(stub, Round(1), &response, Deadline()).ok());

  follower.hang = true;
  grpc::Status status =
      shipper.Ship(stub, Round(1), &response, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();

  follower.hang = false;
  response.Clear();
  status = shipper.Ship(stub, Round(3), &response, Deadline());
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.results_size(), 3);
  EXPECT_EQ(follower.streams_opened.load(), 2);
  EXPECT_EQ(follower.calls.load(), 0);
}

TEST_F(PeerShipperTest, PeersRefusalEndsTheRoundWithItsStatus) {
  FakeFollower follower(/*streams=*/true);
  auto stub = Serve(&follower);
  PeerShipper shipper;
  follower.refuse = true;
  rv1::ShipResponse response;
  grpc::Status status = shipper.Ship(stub, Round(1), &response, Deadline());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  // Not taken for a peer without streams.
  EXPECT_TRUE(shipper.streaming());
  EXPECT_EQ(follower.calls.load(), 0);

  follower.refuse = false;
  ASSERT_TRUE(shipper.Ship(stub, Round(1), &response, Deadline()).ok());
  EXPECT_EQ(follower.streams_opened.load(), 2);
}

TEST_F(PeerShipperTest, StoppedPeerIsUnavailableAndANewAddressGetsItsOwnStream) {
  FakeFollower first(/*streams=*/true);
  FakeFollower second(/*streams=*/true);
  auto to_first = Serve(&first);
  auto to_second = Serve(&second);
  PeerShipper shipper;
  rv1::ShipResponse response;
  ASSERT_TRUE(shipper.Ship(to_first, Round(1), &response, Deadline()).ok());

  servers_[0]->Shutdown(absl::ToChronoTime(absl::Now()));
  grpc::Status status = shipper.Ship(to_first, Round(1), &response, Deadline());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();

  // The peer moved: its new stub, its new stream.
  ASSERT_TRUE(shipper.Ship(to_second, Round(2), &response, Deadline()).ok());
  EXPECT_EQ(response.results_size(), 2);
  EXPECT_EQ(second.streams_opened.load(), 1);
  EXPECT_EQ(first.stream_messages.load(), 1);
}

}  // namespace
}  // namespace dedup::server::cluster
