#ifndef DEDUP_SERVER_TENANT_QUOTA_H_
#define DEDUP_SERVER_TENANT_QUOTA_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace dedup::server {

// What one tenant may hold of the server at once, so that no tenant can
// take what the server-wide limits leave for all (design.md §10): open
// Stream calls, and storage tasks (a unary call, a Batch, or one batch of
// a Stream) queued for or held by a worker. A tenant is an authenticated
// identity. Without authentication every caller is trusted alike and the
// empty tenant is not limited: a loopback or single-tenant server keeps
// the whole of the server-wide limits for its clients.
//
// It also tells a tenant's share of the CPU from work beyond it. While
// another tenant has started a task within the last one to two seconds, a
// tenant's task is beyond its share when it joins one the tenant already
// holds, or when the tenant asked for more than kHeavyShare times an equal
// share of the operations all active tenants started over the same
// windows. Such a task runs in the worker pool's yielding lane
// (server/worker_pool.h): a tenant that floods the server yields all its
// work to a lighter one, not only the work beside its first call. Alone
// on a server, a tenant's every task is within its share.
//
// And it paces a tenant with a rate of operations (Limits::
// max_operations_per_second, none by default): each task is charged its
// operations (at least one) when it starts, and told when it may run so
// that the tenant keeps to its rate over time (the generic cell rate
// algorithm: a tenant may run ahead of its rate by kRateBurst, and a task
// that would wait longer than kMaxRateWait is refused). A rate caps what a tenant takes of the
// server's CPU and storage, whatever else runs; the shares above adapt to
// who is active but cannot keep a flood's work from the cores
// (bench/RESULTS.md, "A rate per identity").
//
// Thread-safe. Tenants holding nothing take no memory beyond their names,
// kept until a task starts two windows after their last one, and their
// paced time, kept until it has passed.
class TenantQuota {
 public:
  struct Limits {
    uint32_t max_open_streams = 32;
    uint32_t max_queued_tasks = 256;
    // Operations a second one tenant may start; 0: not paced.
    uint32_t max_operations_per_second = 0;
  };

  enum class TaskStart {
    kRefused,      // The tenant holds its limit of tasks; nothing counted.
    kOverRate,     // The tenant is booked more than kMaxRateWait ahead of
                   // its rate; nothing counted.
    kShare,        // Counted; within the tenant's share.
    kBeyondShare,  // Counted; the tenant holds another task while another
                   // tenant is active.
  };
  // Windows of activity, whole multiples of this from the first task: a
  // tenant that started a task in the current window or the one before
  // counts as active.
  static constexpr std::chrono::seconds kActiveWindow{1};
  // A tenant asking for more operations than this many equal shares of
  // the active tenants' (over the current window and the one before) is
  // beyond its share: with two tenants, three times the other's.
  static constexpr double kHeavyShare = 1.5;
  // How far ahead of its rate a paced tenant may run: the operations of
  // this long at its rate start at once after a pause.
  static constexpr std::chrono::milliseconds kRateBurst{100};
  // A paced task that would wait longer than this is refused, so that a
  // call is not held for longer than clients commonly wait.
  static constexpr std::chrono::milliseconds kMaxRateWait{500};

  explicit TenantQuota(Limits limits) : limits_(limits) {}

  TenantQuota(const TenantQuota&) = delete;
  TenantQuota& operator=(const TenantQuota&) = delete;

  // Counts one in for `tenant`, or returns false when it holds its limit.
  // Each true is matched by one Close/Finish with the same tenant.
  bool TryOpenStream(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);
  void CloseStream(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);
  struct Started {
    TaskStart start;
    // For a tenant ahead of its rate, when the task may run (for
    // kOverRate, when it would have); unset: at once.
    std::optional<std::chrono::steady_clock::time_point> not_before;
  };
  // Counts a task of `operations` (a Batch's items; 1 for a unary call) in
  // for `tenant` (see TaskStart), and charges them to its rate; each
  // start other than kRefused and kOverRate is matched by one FinishTask.
  Started Start(const std::string& tenant, uint64_t operations,
                std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now())
      ABSL_LOCKS_EXCLUDED(mu_);
  // Start, for its kind alone.
  TaskStart StartTask(const std::string& tenant, uint64_t operations = 1,
                      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now())
      ABSL_LOCKS_EXCLUDED(mu_) {
    return Start(tenant, operations, now).start;
  }
  void FinishTask(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back to `tenant`'s rate the operations of a task started that
  // did not run (the worker pool refused it).
  void Refund(const std::string& tenant, uint64_t operations) ABSL_LOCKS_EXCLUDED(mu_);

  // Tenants holding anything now.
  size_t tenants() const ABSL_LOCKS_EXCLUDED(mu_);
  const Limits& limits() const { return limits_; }

 private:
  struct Held {
    uint32_t streams = 0;
    uint32_t tasks = 0;
  };
  // Drops `tenant`'s entry once it holds nothing.
  void Tidy(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // What `operations` cost of the tenant's rate.
  std::chrono::nanoseconds Cost(uint64_t operations) const;

  // Moves the windows on to `now`.
  void MoveWindows(std::chrono::steady_clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);
  // The operations of the tasks each tenant started in the window that
  // began at `window_start_`, and in the window before it, with their
  // sums and the number of tenants in either.
  std::chrono::steady_clock::time_point window_start_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> started_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> started_before_ ABSL_GUARDED_BY(mu_);
  uint64_t started_sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t started_before_sum_ ABSL_GUARDED_BY(mu_) = 0;
  size_t active_tenants_ ABSL_GUARDED_BY(mu_) = 0;
  // Paced tenants: the time up to which each tenant's charged operations
  // have paid at its rate. Entries in the past are dropped once the map
  // has grown to `sweep_at_`.
  absl::flat_hash_map<std::string, std::chrono::steady_clock::time_point> paid_until_
      ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = 64;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_TENANT_QUOTA_H_
