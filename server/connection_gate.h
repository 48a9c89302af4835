#ifndef DEDUP_SERVER_CONNECTION_GATE_H_
#define DEDUP_SERVER_CONNECTION_GATE_H_

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/connection_table.h"

namespace dedup::server {

// Why the gate closed a connection as soon as it was accepted.
enum class ConnectionRefusal {
  kServerFull,   // limits.max_connections were open
  kAddressFull,  // limits.max_connections_per_address were open from its address
  kDescriptors,  // the process had no descriptor left to accept it with
};

// The admission of TCP connections to the gRPC listeners of this process.
//
// gRPC 1.51 accepts connections itself, without a limit, and when accept4
// fails for lack of descriptors (EMFILE, ENFILE) it stops accepting on
// that listener for good: anyone able to open enough TCP connections could
// end a server's service without a certificate. dedupd therefore provides
// the accept4 that gRPC calls (connection_gate.cc defines it; every other
// caller in the process gets the system's accept4 unchanged, via
// AcceptConnection below). Through it:
//
// - a connection past limits.max_connections, or past
//   limits.max_connections_per_address from one address, on a guarded
//   listener is closed as soon as it is accepted, and accepting goes on;
// - when no descriptor is left, a descriptor kept in reserve is freed to
//   accept and close each waiting connection, so the listen queue empties
//   and clients are refused rather than left waiting, and gRPC is told
//   "try again" instead of the error that would end its listener.
//
// Thread-safe. One per process (Get), since accept4 is.
class ConnectionGate {
 public:
  static ConnectionGate& Get();

  // Applies `limits` to connections accepted on local TCP port `port`, and
  // calls `on_refused` (under the gate's lock: it must not call the gate)
  // for each connection refused there, until Unguard(port).
  void Guard(int port, ConnectionTable::Limits limits,
             std::function<void(ConnectionRefusal)> on_refused);
  void Unguard(int port);

  // Whether accepting on `port` has failed for lack of descriptors at or
  // after `since`.
  bool ShortOfDescriptorsSince(int port, absl::Time since) const;
  // Connections recorded as open on `port` (those closed since the last
  // sweep still count).
  size_t OpenConnections(int port) const;

  // accept4(2) with the admission above: never fails with EMFILE or
  // ENFILE (EAGAIN instead), and never returns a refused connection.
  int AcceptConnection(int listen_fd, sockaddr* address, socklen_t* length, int flags);

 private:
  ConnectionGate() = default;
  // Sweeps (ConnectionTable::Sweep) a limit may run: a few at once, then
  // one per interval, since each costs a system call per connection.
  struct SweepBudget {
    int tokens = 4;  // kSweepBurst in connection_gate.cc
    absl::Time refilled = absl::InfinitePast();
    bool Take(absl::Time now, absl::Duration interval);
  };
  struct Listener {
    Listener(ConnectionTable::Limits limits, std::function<void(ConnectionRefusal)> callback)
        : table(limits), on_refused(std::move(callback)) {}
    ConnectionTable table;
    std::function<void(ConnectionRefusal)> on_refused;
    absl::Time short_of_descriptors = absl::InfinitePast();
    SweepBudget server_sweeps;
    absl::flat_hash_map<std::string, SweepBudget> address_sweeps;
  };

  // Accepts and closes one waiting connection on `listen_fd` with the
  // reserve descriptor; false when there is no reserve or nothing waits.
  bool RefuseWithReserve(int listen_fd) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the accepted `fd` from `peer` may stay open.
  bool Admit(int listen_fd, int fd, const sockaddr_storage& peer) ABSL_LOCKS_EXCLUDED(mu_);
  // Notes that `listen_fd` ran out of descriptors, and whether a
  // connection was refused for it.
  void RecordShortage(int listen_fd, bool refused) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, std::unique_ptr<Listener>> listeners_ ABSL_GUARDED_BY(mu_);
  absl::Mutex reserve_mu_;
  int reserve_fd_ ABSL_GUARDED_BY(reserve_mu_) = -1;
};

// Raises this process's soft limit on open descriptors to its hard limit,
// so that connections and storage files have all the descriptors the
// system grants. Returns the limit in force afterwards.
uint64_t RaiseDescriptorLimit();

}  // namespace dedup::server

#endif  // DEDUP_SERVER_CONNECTION_GATE_H_
