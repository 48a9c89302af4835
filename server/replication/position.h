#ifndef DEDUP_SERVER_REPLICATION_POSITION_H_
#define DEDUP_SERVER_REPLICATION_POSITION_H_

#include <cstdint>

namespace dedup::server::replication {

// A place in a shard's log: the epoch of the leader that wrote the entry
// and its sequence number. Logs compare by epoch first (docs/replication.md
// §3): of two logs, the one whose last entry has the higher epoch holds
// every entry committed before that epoch began.
struct Position {
  uint64_t epoch = 0;
  uint64_t seq = 0;

  bool operator==(const Position& o) const { return epoch == o.epoch && seq == o.seq; }
  bool operator!=(const Position& o) const { return !(*this == o); }
  bool operator<(const Position& o) const {
    return epoch != o.epoch ? epoch < o.epoch : seq < o.seq;
  }
};

}  // namespace dedup::server::replication

#endif  // DEDUP_SERVER_REPLICATION_POSITION_H_
