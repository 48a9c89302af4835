#include "server/token_guess_brake.h"

#include <iterator>

namespace dedup::server {

bool TokenGuessBrake::Braked(const std::string& address, absl::Time now) const {
  auto it = addresses_.find(address);
  return it != addresses_.end() && it->second.count >= options_.max_unknown &&
         now - it->second.last < options_.penalty;
}

void TokenGuessBrake::RecordUnknown(const std::string& address, absl::Time now) {
  auto it = addresses_.find(address);
  if (it == addresses_.end()) {
    if (addresses_.size() >= options_.max_addresses) Forget(now);
    if (addresses_.size() >= options_.max_addresses) return;
    it = addresses_.emplace(address, Guesses{now, now, 0}).first;
  }
  Guesses& guesses = it->second;
  // A count lapses once `penalty` has passed since it began without the
  // brake, or since its last guess under the brake.
  const bool braked = guesses.count >= options_.max_unknown;
  if ((braked && now - guesses.last >= options_.penalty) ||
      (!braked && now - guesses.first >= options_.penalty)) {
    guesses = Guesses{now, now, 0};
  }
  ++guesses.count;
  guesses.last = now;
}

void TokenGuessBrake::Forget(absl::Time now) {
  for (auto it = addresses_.begin(); it != addresses_.end();) {
    auto next = std::next(it);
    if (now - it->second.last >= options_.penalty) addresses_.erase(it);
    it = next;
  }
}

}  // namespace dedup::server
