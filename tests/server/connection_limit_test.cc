// Connections are bounded (design.md §10): past limits.max_connections, or
// past limits.max_connections_per_address from one address, a connection
// is closed as soon as it is accepted and the server goes on accepting;
// when the process runs out of descriptors, waiting clients are refused,
// /readyz turns 503, and new clients are served again once descriptors
// are free.
#include <dirent.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/connection_gate.h"
#include "server/connection_table.h"
#include "tests/common/http_scrape.h"
#include "tests/server/test_server.h"

namespace dedup::server::test {
namespace {

using ::dedup::test::ConnectLoopback;
using Verdict = ConnectionTable::Verdict;

const std::string kHostA("\x7f\x00\x00\x01", 4);
const std::string kHostB("\x0a\x00\x00\x02", 4);

TEST(ConnectionTableTest, AdmitsUpToEachLimit) {
  ConnectionTable table({/*max_connections=*/3, /*max_connections_per_address=*/2});
  EXPECT_EQ(table.Admit(10, 100, kHostA), Verdict::kAdmitted);
  EXPECT_EQ(table.Admit(11, 101, kHostA), Verdict::kAdmitted);
  EXPECT_EQ(table.Admit(12, 102, kHostA), Verdict::kAddressFull);
  EXPECT_EQ(table.Admit(12, 102, kHostB), Verdict::kAdmitted);
  EXPECT_EQ(table.Admit(13, 103, kHostB), Verdict::kServerFull);
  EXPECT_EQ(table.open(), 3u);
  EXPECT_EQ(table.open_from(kHostA), 2u);
  EXPECT_EQ(table.open_from(kHostB), 1u);
}

TEST(ConnectionTableTest, ADescriptorHandedOutAgainReplacesItsOldConnection) {
  ConnectionTable table({/*max_connections=*/2, /*max_connections_per_address=*/1});
  ASSERT_EQ(table.Admit(10, 100, kHostA), Verdict::kAdmitted);
  // Descriptor 10 was closed and now holds another connection, from B.
  EXPECT_EQ(table.Admit(10, 200, kHostB), Verdict::kAdmitted);
  EXPECT_EQ(table.open_from(kHostA), 0u);
  EXPECT_EQ(table.Admit(11, 201, kHostA), Verdict::kAdmitted);
}

TEST(ConnectionTableTest, SweepForgetsClosedConnectionsOnly) {
  ConnectionTable table({/*max_connections=*/10, /*max_connections_per_address=*/2});
  ASSERT_EQ(table.Admit(10, 100, kHostA), Verdict::kAdmitted);
  ASSERT_EQ(table.Admit(11, 101, kHostA), Verdict::kAdmitted);
  ASSERT_EQ(table.Admit(12, 102, kHostB), Verdict::kAdmitted);
  const auto only_11_alive = [](int fd, uint64_t inode) { return fd == 11 && inode == 101; };
  EXPECT_EQ(table.Sweep(only_11_alive, &kHostA), 1u) << "only A's connections are checked";
  EXPECT_EQ(table.open(), 2u);
  EXPECT_EQ(table.Sweep(only_11_alive), 1u);
  EXPECT_EQ(table.open(), 1u);
  EXPECT_EQ(table.open_from(kHostA), 1u);
}

// Waits up to `timeout` for `condition`.
bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A stub on a connection of its own, that retries a refused connection
// after 100 ms (gRPC's default wait is a second).
std::unique_ptr<v1::Dedup::Stub> FreshStub(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  return v1::Dedup::NewStub(grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                                      grpc::InsecureChannelCredentials(), args));
}

// Claims a fresh key through `stub`, waiting at most `deadline` for a
// connection and an answer.
grpc::Status ClaimWithin(v1::Dedup::Stub& stub, std::chrono::milliseconds deadline) {
  static int keys = 0;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  context.set_wait_for_ready(true);
  v1::ClaimResponse response;
  return stub.Claim(&context, ClaimOf("orders", absl::StrCat("key-", ++keys), "w"), &response);
}

class ConnectionLimitTest : public ServerTest {
 protected:
  std::string Config() const override {
    return R"pb(
      durability: "buffered"
      limits { max_connections: 16 max_connections_per_address: 4 }
    )pb";
  }

  // dedup_connections_refused_total{reason}.
  double Refused(const std::string& reason) {
    for (const prometheus::MetricFamily& family :
         server_->server().metrics()->registry()->Collect()) {
      if (family.name != "dedup_connections_refused_total") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        if (metric.label.at(0).value == reason) return metric.counter.value;
      }
    }
    return -1;
  }

  size_t Open() { return ConnectionGate::Get().OpenConnections(server_->server().port()); }
};

TEST_F(ConnectionLimitTest, AConnectionPastTheAddressLimitIsClosedAndAcceptingGoesOn) {
  const int port = server_->server().port();
  ASSERT_THAT(ClaimWithin(stub(), std::chrono::seconds(5)), IsOk());  // The fixture's connection.
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(ConnectLoopback(port));
    ASSERT_GE(held.back(), 0);
  }
  ASSERT_TRUE(Eventually([&] { return Open() == 4; }, std::chrono::seconds(5))) << Open();

  const int fifth = ConnectLoopback(port);
  ASSERT_GE(fifth, 0) << "the kernel completes the handshake; the server then closes it";
  EXPECT_TRUE(::dedup::test::ClosedByPeerWithin(fifth, std::chrono::seconds(2)));
  close(fifth);
  EXPECT_EQ(Refused("address_limit"), 1);
  EXPECT_EQ(Open(), 4u);
  EXPECT_THAT(ClaimWithin(stub(), std::chrono::seconds(1)), IsOk())
      << "connections already open are served";

  for (int fd : held) close(fd);
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<v1::Dedup::Stub> fresh = FreshStub(port);
  EXPECT_THAT(ClaimWithin(*fresh, std::chrono::seconds(1)), IsOk())
      << "a new client is served once the address's connections are closed";
  EXPECT_EQ(Refused("address_limit"), 1) << "at its first attempt";
  std::printf(
      "[ measured ] a new client served %.1f ms after the held connections closed\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
}

// Descriptors open in this process.
int OpenDescriptors() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count - 3;  // ".", ".." and the directory's own descriptor.
}

// The issue that made the gate: gRPC 1.51 stopped accepting for good after
// one accept4 failed with EMFILE, while /readyz stayed 200.
class DescriptorExhaustionTest : public ServerTest {
 protected:
  void TearDown() override {
    for (int fd : held_) close(fd);
    if (saved_.rlim_cur != 0) setrlimit(RLIMIT_NOFILE, &saved_);
    ServerTest::TearDown();
  }

  std::vector<int> held_;
  rlimit saved_{};
};

TEST_F(DescriptorExhaustionTest, NewClientsAreServedWithinASecondOnceDescriptorsAreFree) {
  const int port = server_->server().port();
  ASSERT_THAT(ClaimWithin(stub(), std::chrono::seconds(5)), IsOk());
  ASSERT_TRUE(server_->server().Ready());

  // The server and these clients share the process's descriptors: with 64
  // left, connecting until none is left starves the server's accept4.
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved_), 0);
  rlimit tight = saved_;
  tight.rlim_cur = static_cast<rlim_t>(OpenDescriptors() + 64);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  for (int i = 0; i < 256; ++i) {
    const int fd = ConnectLoopback(port);
    if (fd >= 0) held_.push_back(fd);
    // Once full, free one descriptor for a client whose connection the
    // server then has none to accept with.
    if (fd < 0 && !held_.empty()) {
      close(held_.back());
      held_.pop_back();
    }
  }
  EXPECT_TRUE(Eventually([&] { return !server_->server().Ready(); }, std::chrono::seconds(5)))
      << "readiness turns false while the server cannot accept";

  for (int fd : held_) close(fd);
  held_.clear();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved_), 0);
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<v1::Dedup::Stub> fresh = FreshStub(port);
  EXPECT_THAT(ClaimWithin(*fresh, std::chrono::seconds(1)), IsOk())
      << "a new client is served within a second of the descriptors' release";
  std::printf(
      "[ measured ] a new client served %.1f ms after the descriptors were released\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  EXPECT_TRUE(Eventually([&] { return server_->server().Ready(); }, std::chrono::seconds(3)))
      << "ready again a second after the last refusal";
}

}  // namespace
}  // namespace dedup::server::test
