#ifndef DEDUP_CLIENT_EXAMPLES_PAYMENT_PROVIDER_H_
#define DEDUP_CLIENT_EXAMPLES_PAYMENT_PROVIDER_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dedup::examples {

// A stand-in for a downstream payment provider. It charges every time it is
// asked (it does not deduplicate: that is dedupd's job), but it honours
// fencing tokens: per key it remembers the highest token it has seen and
// refuses a charge with a lower one, so a worker whose lease was taken over
// cannot charge after the new holder did. Thread-safe.
class PaymentProvider {
 public:
  struct Options {
    absl::Duration charge_time = absl::Milliseconds(1);
    // The first charge attempt of one key in every `fail_first_every` fails
    // (0: none), like a provider timing out.
    int fail_first_every = 0;
  };

  explicit PaymentProvider(Options options) : options_(options) {}

  // Charges `key`. `token` 0 means the caller has no token (no dedup);
  // then no stale check is possible. `key_index` picks which keys fail.
  absl::Status Charge(const std::string& key, uint64_t token, int key_index);

  int64_t charges() const;
  // Keys charged more than once.
  int64_t double_charged_keys() const;
  int64_t refused_stale() const;

 private:
  struct KeyState {
    uint64_t highest_token = 0;
    int charges = 0;
    int attempts = 0;
  };
  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, KeyState> keys_ ABSL_GUARDED_BY(mu_);
  int64_t charges_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_stale_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dedup::examples

#endif  // DEDUP_CLIENT_EXAMPLES_PAYMENT_PROVIDER_H_
