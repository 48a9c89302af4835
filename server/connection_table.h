#ifndef DEDUP_SERVER_CONNECTION_TABLE_H_
#define DEDUP_SERVER_CONNECTION_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace dedup::server {

// The TCP connections a listener holds, and whether one more may join:
// at most `max_connections` at once, and at most
// `max_connections_per_address` from one peer address (design.md §10).
// Pure bookkeeping with no I/O: the caller accepts, asks Admit, and closes
// what is refused (connection_gate.h).
//
// A connection is known by its descriptor and its socket's inode. The
// listener's owner (gRPC) closes descriptors without telling the table, so
// Sweep asks the caller which recorded connections are still alive, and a
// descriptor admitted again replaces whatever it held before.
//
// Not thread-safe: the caller locks.
class ConnectionTable {
 public:
  struct Limits {
    uint32_t max_connections = 4096;
    uint32_t max_connections_per_address = 512;
  };
  enum class Verdict { kAdmitted, kServerFull, kAddressFull };

  explicit ConnectionTable(Limits limits) : limits_(limits) {}

  // Records the connection on descriptor `fd` (socket `inode`) from
  // `address` (the peer's address bytes) if both limits allow one more.
  // A connection recorded earlier on `fd` is gone, since its descriptor
  // was handed out again, and is forgotten first.
  Verdict Admit(int fd, uint64_t inode, const std::string& address);

  // Forgets the recorded connections for which `alive(fd, inode)` is
  // false: all of them, or only those from `address` when it is not null.
  // Returns how many were forgotten.
  size_t Sweep(const std::function<bool(int fd, uint64_t inode)>& alive,
               const std::string* address = nullptr);

  size_t open() const { return by_fd_.size(); }
  size_t open_from(const std::string& address) const;
  const Limits& limits() const { return limits_; }

 private:
  struct Connection {
    uint64_t inode;
    std::string address;
  };
  void Forget(int fd);

  const Limits limits_;
  absl::flat_hash_map<int, Connection> by_fd_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> by_address_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_CONNECTION_TABLE_H_
