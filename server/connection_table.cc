#include "server/connection_table.h"

#include <vector>

namespace dedup::server {

ConnectionTable::Verdict ConnectionTable::Admit(int fd, uint64_t inode,
                                                const std::string& address) {
  Forget(fd);
  if (by_fd_.size() >= limits_.max_connections) return Verdict::kServerFull;
  if (open_from(address) >= limits_.max_connections_per_address) return Verdict::kAddressFull;
  by_fd_.emplace(fd, Connection{inode, address});
  by_address_[address].insert(fd);
  return Verdict::kAdmitted;
}

size_t ConnectionTable::Sweep(const std::function<bool(int fd, uint64_t inode)>& alive,
                              const std::string* address) {
  std::vector<int> gone;
  if (address != nullptr) {
    auto it = by_address_.find(*address);
    if (it == by_address_.end()) return 0;
    for (int fd : it->second) {
      if (!alive(fd, by_fd_.at(fd).inode)) gone.push_back(fd);
    }
  } else {
    for (const auto& [fd, connection] : by_fd_) {
      if (!alive(fd, connection.inode)) gone.push_back(fd);
    }
  }
  for (int fd : gone) Forget(fd);
  return gone.size();
}

size_t ConnectionTable::open_from(const std::string& address) const {
  auto it = by_address_.find(address);
  return it == by_address_.end() ? 0 : it->second.size();
}

void ConnectionTable::Forget(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  auto from = by_address_.find(it->second.address);
  from->second.erase(fd);
  if (from->second.empty()) by_address_.erase(from);
  by_fd_.erase(it);
}

}  // namespace dedup::server
