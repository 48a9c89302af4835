#ifndef DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_
#define DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dedup::server {

// What a gRPC peer is counted by. `host`: its IPv4 address, also when it
// is mapped into IPv6 or translated by NAT64 (64:ff9b::/96), or its whole
// IPv6 address. `prefix`: for an IPv6 address, its /64
// ("2001:db8:0:1::/64"), since anyone with one IPv6 host usually holds the
// whole /64; empty otherwise. Takes a peer as gRPC gives it
// ("ipv4:10.0.0.7:41234", "ipv6:%5B2001:db8::1%5D:41234", or with plain
// brackets), or an address alone ("10.0.0.7", "2001:db8::1",
// "[2001:db8::1]:41234"). Anything else (a Unix socket's peer) is its own
// host.
struct PeerKeys {
  std::string host;
  std::string prefix;
};
PeerKeys PeerAddressKeys(absl::string_view peer);

// A brake on guessing bearer tokens (design.md §10). Once a peer address
// has presented `max_unknown` unknown tokens within `penalty`, every call
// from it that presents a bearer token is refused, without its token being
// looked up, until `penalty` has passed since the last of them. A guesser
// thus tries at most `max_unknown` tokens per `penalty` from one address,
// and learns nothing while braked, since a right token is refused too.
// Peers count by PeerAddressKeys: each address on its own, and the
// addresses of one IPv6 /64 together up to `max_unknown_per_prefix`, so
// that a guesser cannot move on through its /64, yet one client that keeps
// a stale token does not lock its /64 neighbours out (a cloud subnet, the
// pods of one node).
//
// Pure and not thread-safe: the caller locks and passes the time.
class TokenGuessBrake {
 public:
  struct Options {
    uint32_t max_unknown = 20;
    // Of all the addresses of one IPv6 /64 together (16 × max_unknown by
    // default, as the server sets it).
    uint32_t max_unknown_per_prefix = 320;
    absl::Duration penalty = absl::Seconds(10);
    // Sources (keys) tracked at once; past it, ones whose count has lapsed are
    // forgotten first, then new addresses are not tracked until room is
    // made.
    size_t max_addresses = 65536;
  };

  explicit TokenGuessBrake(Options options) : options_(options) {}

  // Whether calls with a bearer token from `peer` (a gRPC peer or an
  // address, as PeerAddressKeys takes) are refused at `now`.
  bool Braked(absl::string_view peer, absl::Time now) const;
  // Notes an unknown token from `peer` at `now`.
  void RecordUnknown(absl::string_view peer, absl::Time now);

  size_t tracked() const { return addresses_.size(); }
  const Options& options() const { return options_; }

 private:
  struct Guesses {
    absl::Time first;  // Of the current count.
    absl::Time last;
    uint32_t count = 0;
  };
  // Forgets sources whose guesses are older than the penalty.
  void Forget(absl::Time now);
  bool Braked(const std::string& key, uint32_t limit, absl::Time now) const;
  void Record(const std::string& key, uint32_t limit, absl::Time now);

  const Options options_;
  absl::flat_hash_map<std::string, Guesses> addresses_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_
