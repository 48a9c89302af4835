#include "payment_provider.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dedup::examples {

absl::Status PaymentProvider::Charge(const std::string& key, uint64_t token, int key_index) {
  bool fail = false;
  {
    absl::MutexLock lock(&mu_);
    KeyState& state = keys_[key];
    if (token != 0 && token < state.highest_token) {
      ++refused_stale_;
      return absl::FailedPreconditionError(absl::StrCat("stale token ", token, " for ", key, ": ",
                                                        state.highest_token, " was seen"));
    }
    if (token > state.highest_token) state.highest_token = token;
    fail = options_.fail_first_every > 0 && key_index % options_.fail_first_every == 0 &&
           state.attempts++ == 0;
  }
  absl::SleepFor(options_.charge_time);  // The provider's round trip.
  if (fail) return absl::UnavailableError(absl::StrCat("provider timed out charging ", key));
  absl::MutexLock lock(&mu_);
  ++keys_[key].charges;
  ++charges_;
  return absl::OkStatus();
}

int64_t PaymentProvider::charges() const {
  absl::MutexLock lock(&mu_);
  return charges_;
}

int64_t PaymentProvider::double_charged_keys() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [key, state] : keys_) n += state.charges > 1 ? 1 : 0;
  return n;
}

int64_t PaymentProvider::refused_stale() const {
  absl::MutexLock lock(&mu_);
  return refused_stale_;
}

}  // namespace dedup::examples
