#include "dedup/client/guard.h"

#include <map>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "scheduler.h"

namespace dedup::client {
namespace {

absl::StatusOr<v1::ReleaseResponse> ReleaseClaim(Client* client, const std::string& ns,
                                                 const std::string& key, uint64_t token) {
  v1::ReleaseRequest release;
  release.set_namespace_(ns);
  release.set_key(key);
  release.set_token(token);
  return client->Release(release);
}

}  // namespace

const char* GuardOutcomeName(GuardOutcome outcome) {
  switch (outcome) {
    case GuardOutcome::kExecuted:
      return "EXECUTED";
    case GuardOutcome::kDuplicate:
      return "DUPLICATE";
    case GuardOutcome::kInProgress:
      return "IN_PROGRESS";
    case GuardOutcome::kWorkFailed:
      return "WORK_FAILED";
    case GuardOutcome::kFailed:
      return "FAILED";
    case GuardOutcome::kMismatch:
      return "MISMATCH";
    case GuardOutcome::kStale:
      return "STALE";
  }
  return "UNKNOWN";
}

// Renews the leases of running side effects: each lease is extended every
// `period` of the client's clock until it is removed. Extends are
// asynchronous, so a slow server never delays the others. An Extend (a late
// one, after the side effect finished) that meets a completed or released
// record answers STALE_TOKEN and changes nothing.
class Guard::LeaseKeeper {
 public:
  LeaseKeeper(Client* client, std::string ns)
      : client_(client),
        ns_(std::move(ns)),
        scheduler_(std::make_unique<Scheduler>(&client->clock())) {}

  // Stops renewing and waits for Extends still in flight (their callbacks
  // use this object).
  ~LeaseKeeper() {
    scheduler_.reset();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* outstanding) { return *outstanding == 0; }, &outstanding_));
  }

  // Renews the lease of (key, token) every `period` until Remove; sets
  // `*lost` if a renewal is refused. `lost` must outlive the entry.
  uint64_t Add(const std::string& key, uint64_t token, absl::Duration lease, absl::Duration period,
               std::atomic<bool>* lost) {
    absl::MutexLock lock(&mu_);
    const uint64_t id = next_id_++;
    Entry& entry = entries_[id];
    entry = Entry{key, token, lease, period, lost, Scheduler::TaskId()};
    entry.renewal = scheduler_->After(period, [this, id] { Renew(id); });
    return id;
  }

  void Remove(uint64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    scheduler_->Cancel(it->second.renewal);
    entries_.erase(it);
  }

 private:
  struct Entry {
    std::string key;
    uint64_t token;
    absl::Duration lease;
    absl::Duration period;
    std::atomic<bool>* lost;  // Owned by the Run call, which removes us first.
    Scheduler::TaskId renewal;
  };

  // On the scheduler's thread: extends the lease once and plans the next.
  void Renew(uint64_t id) {
    v1::ExtendRequest request;
    CallOptions options;
    {
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(id);
      if (it == entries_.end()) return;  // Removed as this renewal started.
      Entry& entry = it->second;
      request.set_namespace_(ns_);
      request.set_key(entry.key);
      request.set_token(entry.token);
      request.set_lease_ms(absl::ToInt64Milliseconds(entry.lease));
      options.deadline = client_->clock().Now() + entry.period;
      entry.renewal = scheduler_->After(entry.period, [this, id] { Renew(id); });
      ++outstanding_;
    }
    // Not under mu_: the answer may come on this very thread.
    client_->ExtendAsync(
        request,
        [this, id](absl::StatusOr<v1::ExtendResponse> response) {
          absl::MutexLock lock(&mu_);
          --outstanding_;
          if (!response.ok() || response->outcome() == v1::ExtendResponse::OK) return;
          if (auto it = entries_.find(id); it != entries_.end()) it->second.lost->store(true);
        },
        options);
  }

  // Constant after construction.
  Client* const client_;
  const std::string ns_;
  std::unique_ptr<Scheduler> scheduler_;  // Reset first on destruction.

  absl::Mutex mu_;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // Extends awaiting their answer.
};

Guard::Guard(Client* client, GuardOptions options)
    : client_(client),
      options_(std::move(options)),
      keeper_(std::make_unique<LeaseKeeper>(client, options_.ns)) {}

Guard::~Guard() = default;

absl::StatusOr<GuardResult> Guard::Run(const std::string& key, const SideEffect& work,
                                       const std::string& fingerprint) {
  v1::ClaimRequest claim;
  claim.set_namespace_(options_.ns);
  claim.set_key(key);
  claim.set_owner(options_.owner);
  claim.set_fingerprint(fingerprint);
  if (options_.lease > absl::ZeroDuration()) {
    claim.set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  }
  absl::StatusOr<v1::ClaimResponse> claimed = client_->Claim(claim);
  if (!claimed.ok()) return claimed.status();

  GuardResult out;
  switch (claimed->outcome()) {
    case v1::ClaimResponse::ACQUIRED:
      break;
    case v1::ClaimResponse::COMPLETED:
      out.outcome = GuardOutcome::kDuplicate;
      out.result = claimed->result();
      return out;
    case v1::ClaimResponse::IN_PROGRESS:
      out.outcome = GuardOutcome::kInProgress;
      return out;
    case v1::ClaimResponse::FAILED:
      out.outcome = GuardOutcome::kFailed;
      return out;
    case v1::ClaimResponse::MISMATCH:
      out.outcome = GuardOutcome::kMismatch;
      return out;
    default:
      return absl::InternalError("dedupd answered Claim without an outcome");
  }
  out.token = claimed->token();

  std::atomic<bool> lease_lost{false};
  const absl::Duration lease =
      options_.lease > absl::ZeroDuration() ? options_.lease : absl::Seconds(30);
  const uint64_t kept =
      keeper_->Add(key, out.token, lease, lease * options_.extend_fraction, &lease_lost);
  absl::StatusOr<std::string> result;
  try {
    result = work(GuardContext{key, out.token, lease_lost});
  } catch (...) {
    keeper_->Remove(kept);
    ReleaseClaim(client_, options_.ns, key, out.token).IgnoreError();
    throw;
  }
  keeper_->Remove(kept);

  if (!result.ok()) {
    absl::StatusOr<v1::ReleaseResponse> released =
        ReleaseClaim(client_, options_.ns, key, out.token);
    out.outcome = GuardOutcome::kWorkFailed;
    out.work_error = result.status();
    out.poisoned = released.ok() && released->outcome() == v1::ReleaseResponse::FAILED;
    return out;
  }

  v1::CompleteRequest complete;
  complete.set_namespace_(options_.ns);
  complete.set_key(key);
  complete.set_token(out.token);
  complete.set_result(*result);
  if (options_.retention > absl::ZeroDuration()) {
    complete.set_retention_ms(absl::ToInt64Milliseconds(options_.retention));
  }
  absl::StatusOr<v1::CompleteResponse> completed = client_->Complete(complete);
  if (!completed.ok()) return completed.status();
  switch (completed->outcome()) {
    case v1::CompleteResponse::OK:
    case v1::CompleteResponse::ALREADY_COMPLETED:
      out.outcome = GuardOutcome::kExecuted;
      out.result = std::move(*result);
      return out;
    default:
      out.outcome = GuardOutcome::kStale;
      return out;
  }
}

}  // namespace dedup::client
