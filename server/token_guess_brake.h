#ifndef DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_
#define DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace dedup::server {

// A brake on guessing bearer tokens (design.md §10). Once a peer address
// has presented `max_unknown` unknown tokens within `penalty`, every call
// from it that presents a bearer token is refused, without its token being
// looked up, until `penalty` has passed since the last of them. A guesser
// thus tries at most `max_unknown` tokens per `penalty` from one address,
// and learns nothing while braked, since a right token is refused too.
//
// Pure and not thread-safe: the caller locks and passes the time.
class TokenGuessBrake {
 public:
  struct Options {
    uint32_t max_unknown = 20;
    absl::Duration penalty = absl::Seconds(10);
    // Addresses tracked at once; past it, ones whose count has lapsed are
    // forgotten first, then new addresses are not tracked until room is
    // made.
    size_t max_addresses = 65536;
  };

  explicit TokenGuessBrake(Options options) : options_(options) {}

  // Whether calls with a bearer token from `address` are refused at `now`.
  bool Braked(const std::string& address, absl::Time now) const;
  // Notes an unknown token from `address` at `now`.
  void RecordUnknown(const std::string& address, absl::Time now);

  size_t tracked() const { return addresses_.size(); }
  const Options& options() const { return options_; }

 private:
  struct Guesses {
    absl::Time first;  // Of the current count.
    absl::Time last;
    uint32_t count = 0;
  };
  // Forgets addresses whose guesses are older than the penalty.
  void Forget(absl::Time now);

  const Options options_;
  absl::flat_hash_map<std::string, Guesses> addresses_;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_TOKEN_GUESS_BRAKE_H_
