#include "server/connection_gate.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

namespace dedup::server {
namespace {

// How often, after the first few, the connections of one full address,
// and of a full server, are checked for ones closed since. Each check
// costs two system calls per connection, so a client retrying against a
// limit cannot make the accepting thread spin on them.
constexpr absl::Duration kAddressSweepInterval = absl::Milliseconds(10);
constexpr absl::Duration kServerSweepInterval = absl::Milliseconds(100);
constexpr int kSweepBurst = 4;
constexpr size_t kSweepBudgetsKept = 1024;

// The accept4 of the next object after this executable: the C library's,
// or a sanitizer's wrapper around it.
int SystemAccept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  using Accept4 = int (*)(int, sockaddr*, socklen_t*, int);
  static const Accept4 next = reinterpret_cast<Accept4>(dlsym(RTLD_NEXT, "accept4"));
  if (next != nullptr) return next(fd, address, length, flags);
  return static_cast<int>(syscall(SYS_accept4, fd, address, length, flags));
}

// The local TCP port of a listening socket, or -1 for any other socket.
int LocalPort(int listen_fd) {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return -1;
  if (local.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  if (local.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  }
  return -1;
}

// The peer address a per-address limit counts by: the IPv4 address
// (also when mapped into IPv6), or the /64 prefix of an IPv6 address,
// since one IPv6 host usually holds a whole /64.
std::string AddressKey(const sockaddr_storage& peer) {
  if (peer.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(peer);
    return std::string(reinterpret_cast<const char*>(&v4.sin_addr), 4);
  }
  if (peer.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(peer);
    const char* bytes = reinterpret_cast<const char*>(&v6.sin6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) return std::string(bytes + 12, 4);
    return std::string(bytes, 8);
  }
  return std::string();
}

// Whether descriptor `fd` still holds the socket with `inode`, and its
// client has not closed it (gRPC closes its side soon after).
bool StillOpen(int fd, uint64_t inode) {
  struct stat status {};
  if (fstat(fd, &status) != 0 || !S_ISSOCK(status.st_mode) || status.st_ino != inode) {
    return false;
  }
  pollfd hangup{fd, POLLRDHUP, 0};
  return poll(&hangup, 1, 0) == 0;
}

}  // namespace

bool ConnectionGate::SweepBudget::Take(absl::Time now, absl::Duration interval) {
  if (refilled == absl::InfinitePast()) refilled = now;
  const int64_t earned = (now - refilled) / interval;
  if (earned > 0) {
    tokens = static_cast<int>(std::min<int64_t>(kSweepBurst, tokens + earned));
    refilled += earned * interval;
  }
  if (tokens == 0) return false;
  --tokens;
  return true;
}

ConnectionGate& ConnectionGate::Get() {
  // Never destroyed: gRPC may accept until the process ends.
  static ConnectionGate* const gate = new ConnectionGate();
  return *gate;
}

void ConnectionGate::Guard(int port, ConnectionTable::Limits limits,
                           std::function<void(ConnectionRefusal)> on_refused) {
  {
    absl::MutexLock lock(&reserve_mu_);
    if (reserve_fd_ < 0) reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  absl::MutexLock lock(&mu_);
  listeners_[port] = std::make_unique<Listener>(limits, std::move(on_refused));
}

void ConnectionGate::Unguard(int port) {
  absl::MutexLock lock(&mu_);
  listeners_.erase(port);
}

bool ConnectionGate::ShortOfDescriptorsSince(int port, absl::Time since) const {
  absl::MutexLock lock(&mu_);
  auto it = listeners_.find(port);
  return it != listeners_.end() && it->second->short_of_descriptors >= since;
}

size_t ConnectionGate::OpenConnections(int port) const {
  absl::MutexLock lock(&mu_);
  auto it = listeners_.find(port);
  return it == listeners_.end() ? 0 : it->second->table.open();
}

int ConnectionGate::AcceptConnection(int listen_fd, sockaddr* address, socklen_t* length,
                                     int flags) {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t peer_length = sizeof(peer);
    const int fd =
        SystemAccept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_length, flags);
    if (fd < 0) {
      if (errno != EMFILE && errno != ENFILE) return -1;
      const bool refused = RefuseWithReserve(listen_fd);
      RecordShortage(listen_fd, refused);
      if (refused) continue;
      // gRPC waits for the next connection to try again; any other error
      // would end its listener.
      errno = EAGAIN;
      return -1;
    }
    if (!Admit(listen_fd, fd, peer)) {
      close(fd);
      continue;
    }
    if (address != nullptr && length != nullptr) {
      std::memcpy(address, &peer, std::min(*length, peer_length));
      *length = peer_length;
    }
    return fd;
  }
}

bool ConnectionGate::RefuseWithReserve(int listen_fd) {
  absl::MutexLock lock(&reserve_mu_);
  if (reserve_fd_ < 0) reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (reserve_fd_ < 0) return false;
  close(reserve_fd_);
  const int fd = SystemAccept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) close(fd);
  reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd >= 0;
}

bool ConnectionGate::Admit(int listen_fd, int fd, const sockaddr_storage& peer) {
  const int port = LocalPort(listen_fd);
  struct stat status {};
  if (port < 0 || fstat(fd, &status) != 0) return true;
  const std::string address = AddressKey(peer);
  absl::MutexLock lock(&mu_);
  auto it = listeners_.find(port);
  if (it == listeners_.end()) return true;
  Listener& listener = *it->second;
  ConnectionTable::Verdict verdict = listener.table.Admit(fd, status.st_ino, address);
  const absl::Time now = absl::Now();
  if (verdict == ConnectionTable::Verdict::kAddressFull &&
      listener.address_sweeps[address].Take(now, kAddressSweepInterval)) {
    listener.table.Sweep(StillOpen, &address);
    verdict = listener.table.Admit(fd, status.st_ino, address);
  }
  if (verdict == ConnectionTable::Verdict::kServerFull &&
      listener.server_sweeps.Take(now, kServerSweepInterval)) {
    listener.table.Sweep(StillOpen);
    verdict = listener.table.Admit(fd, status.st_ino, address);
  }
  // Budgets of addresses no longer connected are dropped, so that they
  // cannot pile up.
  if (listener.address_sweeps.size() > kSweepBudgetsKept) {
    for (auto entry = listener.address_sweeps.begin(); entry != listener.address_sweeps.end();) {
      auto next = std::next(entry);
      if (listener.table.open_from(entry->first) == 0) listener.address_sweeps.erase(entry);
      entry = next;
    }
  }
  switch (verdict) {
    case ConnectionTable::Verdict::kAdmitted:
      return true;
    case ConnectionTable::Verdict::kServerFull:
      listener.on_refused(ConnectionRefusal::kServerFull);
      return false;
    case ConnectionTable::Verdict::kAddressFull:
      listener.on_refused(ConnectionRefusal::kAddressFull);
      return false;
  }
  return false;
}

void ConnectionGate::RecordShortage(int listen_fd, bool refused) {
  const int port = LocalPort(listen_fd);
  absl::MutexLock lock(&mu_);
  auto it = listeners_.find(port);
  if (it == listeners_.end()) return;
  it->second->short_of_descriptors = absl::Now();
  if (refused) it->second->on_refused(ConnectionRefusal::kDescriptors);
}

uint64_t RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return raised.rlim_cur;
  }
  return limit.rlim_cur;
}

}  // namespace dedup::server

// The accept4 that gRPC's listeners call (connection_gate.h). An executable's
// definition comes before the C library's for every shared library loaded.
extern "C" int accept4(int fd, sockaddr* __restrict address, socklen_t* __restrict length,
                       int flags) {
  return dedup::server::ConnectionGate::Get().AcceptConnection(fd, address, length, flags);
}
