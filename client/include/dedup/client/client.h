#ifndef DEDUP_CLIENT_CLIENT_H_
#define DEDUP_CLIENT_CLIENT_H_

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dedup/client/clock.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/security/credentials.h"

namespace dedup::client {

struct ClientOptions {
  // Where dedupd is: "host:port" (or any gRPC target such as
  // "dns:///dedupd.example:7400"), or several nodes of a cluster,
  // comma-separated. The client asks them for the cluster's Topology and
  // then sends every key straight to the node that owns it (in a
  // replicated cluster, the leader of its shard).
  std::string endpoint = "127.0.0.1:7400";
  // Channel credentials; null means plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Deadline of a call that names none. It bounds the retries too.
  absl::Duration default_timeout = absl::Seconds(5);
  // How long one attempt of a call waits for its node's answer before the
  // call is sent again by the newest cluster map, within the call's
  // deadline: a node that hangs (a paused process, a frozen VM, a cut
  // network) refuses nothing and answers nothing, and without this every
  // call routed to it would wait out its deadline, as would calls routed
  // there after it, until something else made the client fetch the map.
  // A node that is merely slow gets the call twice, which every call of
  // dedup.v1 allows (see Client). Zero: one attempt lasts to the deadline.
  absl::Duration attempt_timeout = absl::Seconds(1);
  // Retries of UNAVAILABLE: exponential backoff from `initial_backoff` up to
  // `max_backoff`, each wait jittered to between half and all of it, while
  // the deadline allows.
  absl::Duration initial_backoff = absl::Milliseconds(10);
  absl::Duration max_backoff = absl::Milliseconds(500);
  // The longest wait between attempts to connect to a node that refuses
  // (a node that is down). gRPC's own is two minutes: a node down for a
  // minute would then be connected to again up to a minute after it was
  // back, and the calls for the shards it leads again would fail
  // meanwhile. Zero: gRPC's default.
  absl::Duration max_reconnect_backoff = absl::Seconds(1);
  // Keepalive: while calls (or the coalescing Stream) are open on a
  // connection to a node, the client pings the node every
  // `keepalive_time`, and closes the connection when a ping gets no answer
  // within `keepalive_timeout`; its calls then fail over as on any lost
  // connection, and the next ones connect again. Without it, a connection
  // whose packets a partition or a frozen host drops stays open and
  // silent: its calls wait for their attempt timeouts, and after the path
  // heals the connection waits for TCP's next resend, which after a long
  // cut comes minutes later. Keep `keepalive_time` at or above the nodes'
  // limits.min_client_ping_interval (10 s by default), or a node closes
  // the connection for pinging too often. Zero: no keepalive.
  absl::Duration keepalive_time = absl::Seconds(20);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // Coalescing: calls from any thread travel as batches on a shared Stream,
  // much as Nagle's algorithm does for TCP. A call that finds fewer than
  // `max_batches_in_flight` batches in the air leaves at once; calls made
  // while that many are in the air wait for one of them to be answered,
  // for `max_batch` of them, or for `batch_window`, whichever comes first,
  // and leave together. false: every call is its own unary RPC.
  bool coalesce = true;
  absl::Duration batch_window = absl::Microseconds(200);
  int max_batch = 64;
  // At most 16: dedupd stops reading a Stream with 16 batches unanswered
  // (its limits.max_stream_batches).
  int max_batches_in_flight = 4;
  // Cache of COMPLETED answers to Claim, off (0) by default. Above 0, up to
  // this many answers are kept (and at most `completed_cache_bytes` of
  // them, results included), so that a duplicate of a recently completed
  // key is answered without a round trip. The answer is exactly what the
  // server would send: a completion is final until its retention ends, and
  // an answer is kept for no longer than the server said it still remembers
  // it (retention_remaining_ms, counted from before the call was sent), nor
  // than `completed_cache_max_age`, and serves only Claims with the same
  // fingerprint. Answers of other kinds are never cached.
  int completed_cache_entries = 0;
  size_t completed_cache_bytes = 64u << 20;
  absl::Duration completed_cache_max_age = absl::Minutes(10);
  // Where the client reads time; null means SystemClock::Default(). Must
  // outlive the client. Timeouts, backoffs and batch windows all run on it
  // (see clock.h), so on a clock a test moves by hand they last until the
  // test moves it.
  const Clock* clock = nullptr;
};

// Per-call options.
struct CallOptions {
  // The call's deadline, a wall-clock instant; absl::InfinitePast() means
  // default_timeout from the start of the call. It is compared with the
  // wall clock once, when the call starts; the time left is then measured
  // on the monotonic clock, so setting the system clock during the call
  // does not move its end (see clock.h).
  absl::Time deadline = absl::InfinitePast();
};

template <typename T>
using Callback = std::function<void(absl::StatusOr<T>)>;

// A client of one dedupd server.
//
// Which calls are retried, and why that is safe: every call of dedup.v1 is
// safe to repeat, so the client retries UNAVAILABLE (the server or the
// network was unreachable; the call may or may not have been applied)
// within the call's deadline, and an attempt that has had no answer within
// ClientOptions::attempt_timeout likewise:
//  - Claim is re-entrant by owner: a repeat by the owner that won returns
//    ACQUIRED with the same token, so a lost ACQUIRED is never lost;
//  - Complete and Release carry the token: a repeat answers as the first
//    call did (ALREADY_COMPLETED; OK or FAILED for Release);
//  - Extend with the same token only moves the lease again; Query and Scan
//    read.
// FAILED_PRECONDITION (the node does not own or lead the key's shard: the
// cluster map changed) fetches the map again and re-sends the call, the
// first time at once and then with the same backoff, within the deadline.
// Each UNAVAILABLE also fetches the map (at most one fetch in flight, one
// every 100 ms at most), since the node that failed may have lost its
// shards. So in a replicated cluster a failover, or leadership moving
// several times, shows only as latency as long as a new leader is elected
// before the deadline. Other errors (INVALID_ARGUMENT, NOT_FOUND,
// DEADLINE_EXCEEDED, ...) are returned at once. In a statically sharded
// cluster, a node that is down makes its own keys UNAVAILABLE (after
// retries) while keys of other nodes proceed.
//
// Outcomes (ACQUIRED, IN_PROGRESS, STALE_TOKEN, ...) are in the returned
// responses, exactly as the server sent them; a non-OK status means the
// call has no answer.
//
// Thread-safe: share one Client across all threads of a process; that is
// what lets concurrent calls coalesce. Callbacks of the asynchronous forms
// run on the client's own threads, most on the one thread that receives
// every answer of this client: while a callback runs no other answer is
// delivered, so callbacks must not block, nor destroy the client. A
// blocking call of this client from one of its callbacks would wait for
// its own thread, so it answers FAILED_PRECONDITION at once.
class Client {
 public:
  // Asks the endpoints for the cluster topology (briefly: an unreachable
  // server does not fail the creation; the map is fetched again when a call
  // fails UNAVAILABLE or a node answers that a key is not its own).
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);

  // Waits for calls in flight (up to their deadlines) and closes.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  absl::StatusOr<v1::ClaimResponse> Claim(const v1::ClaimRequest& request,
                                          const CallOptions& options = {});
  absl::StatusOr<v1::CompleteResponse> Complete(const v1::CompleteRequest& request,
                                                const CallOptions& options = {});
  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& request,
                                              const CallOptions& options = {});
  absl::StatusOr<v1::ExtendResponse> Extend(const v1::ExtendRequest& request,
                                            const CallOptions& options = {});
  absl::StatusOr<v1::QueryResponse> Query(const v1::QueryRequest& request,
                                          const CallOptions& options = {});

  // Asynchronous forms: `done` runs once, on a client thread.
  void ClaimAsync(const v1::ClaimRequest& request, Callback<v1::ClaimResponse> done,
                  const CallOptions& options = {});
  void CompleteAsync(const v1::CompleteRequest& request, Callback<v1::CompleteResponse> done,
                     const CallOptions& options = {});
  void ReleaseAsync(const v1::ReleaseRequest& request, Callback<v1::ReleaseResponse> done,
                    const CallOptions& options = {});
  void ExtendAsync(const v1::ExtendRequest& request, Callback<v1::ExtendResponse> done,
                   const CallOptions& options = {});
  void QueryAsync(const v1::QueryRequest& request, Callback<v1::QueryResponse> done,
                  const CallOptions& options = {});

  // Future forms of the same.
  std::future<absl::StatusOr<v1::ClaimResponse>> ClaimFuture(const v1::ClaimRequest& request,
                                                             const CallOptions& options = {});
  std::future<absl::StatusOr<v1::CompleteResponse>> CompleteFuture(
      const v1::CompleteRequest& request, const CallOptions& options = {});

  // Admin: every record of a scan, node by node (at most request.limit()).
  absl::StatusOr<std::vector<v1::Record>> Scan(const v1::ScanRequest& request,
                                               const CallOptions& options = {});

  // gRPC health for dedup.v1.Dedup: OK when every node is SERVING.
  absl::Status Health(const CallOptions& options = {});

  // The clock the client reads (ClientOptions::clock, or the system's).
  // Code built on the client, such as Guard, times itself on it too.
  const Clock& clock() const;

 private:
  class Impl;
  explicit Client(const ClientOptions& options);

  std::unique_ptr<Impl> impl_;
};

}  // namespace dedup::client

#endif  // DEDUP_CLIENT_CLIENT_H_
