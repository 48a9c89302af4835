#ifndef DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_
#define DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dedup::server {

// The source a per-address limit counts a gRPC peer by (PeerAddressKey
// below): an IPv4 address, also when it is mapped into IPv6 ("10.0.0.7"),
// or the /64 prefix of an IPv6 address ("2001:db8:0:1::/64"), since anyone
// with one IPv6 host usually holds its whole /64. Takes a peer as gRPC
// gives it ("ipv4:10.0.0.7:41234", "ipv6:%5B2001:db8::1%5D:41234", or with
// plain brackets), or an address alone ("10.0.0.7", "2001:db8::1",
// "[2001:db8::1]:41234"). Anything else (a Unix socket's peer) is its own
// key.
std::string PeerAddressKey(absl::string_view peer);

// A brake on guessing bearer tokens (design.md §10). Once a peer address
// has presented `max_unknown` unknown tokens within `penalty`, every call
// from it that presents a bearer token is refused, without its token being
// looked up, until `penalty` has passed since the last of them. A guesser
// thus tries at most `max_unknown` tokens per `penalty` from one address,
// and learns nothing while braked, since a right token is refused too.
// Peers count by PeerAddressKey: every address of an IPv6 /64 shares one
// count.
//
// Pure and not thread-safe: the caller locks and passes the time.
class TokenGuessBrake {
 public:
  struct Options {
    uint32_t max_unknown = 20;
    absl::Duration penalty = absl::Seconds(10);
    // Sources (keys) tracked at once; past it, ones whose count has lapsed are
    // forgotten first, then new addresses are not tracked until room is
    // made.
    size_t max_addresses = 65536;
  };

  explicit TokenGuessBrake(Options options) : options_(options) {}

  // Whether calls with a bearer token from `peer` (a gRPC peer or an
  // address, as PeerAddressKey takes) are refused at `now`.
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

  const Options options_;
  absl::flat_hash_map<std::string, Guesses> addresses_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_
