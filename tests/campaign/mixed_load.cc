#include "tests/campaign/mixed_load.h"

#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dedup::campaign {
namespace {

using storage::Outcome;

constexpr char kSeparator = '|';

storage::ClaimOp ClaimOf(const Policy& p, const std::string& key, const std::string& owner) {
  storage::ClaimOp op;
  op.ns = p.ns;
  op.key = key;
  op.owner = owner;
  op.lease_ms = p.lease_ms;
  op.max_attempts = p.max_attempts;
  op.failed_retention_ms = kRetentionMs;
  return op;
}

const Policy& PolicyOf(const std::string& ns) {
  for (const Policy& p : Policies()) {
    if (p.ns == ns) return p;
  }
  return Policies().front();
}

std::string ResultFor(const std::string& key, uint64_t token) {
  return absl::StrCat(std::string("r\0\xff", 3), key, ":", token);
}

}  // namespace

const std::vector<Policy>& Policies() {
  static const std::vector<Policy>* const policies = new std::vector<Policy>{
      {"payments", 30'000, 5},
      {"coupons", 15'000, 2},
      {"webhooks", 2'000, 10},
  };
  return *policies;
}

std::string CampaignConfig() {
  std::string config;
  for (const Policy& p : Policies()) {
    absl::StrAppend(&config, "namespaces { name: \"", p.ns, "\" policy { lease_default: \"",
                    p.lease_ms, "ms\" lease_max: \"10m\" retention_default: \"", kRetentionMs,
                    "ms\" retention_floor: \"1h\" max_attempts: ", p.max_attempts, " } }\n");
  }
  return config;
}

void LoadCounts::Add(const LoadCounts& o) {
  for (int i = 0; i < 3; ++i) calls[i] += o.calls[i];
  answered += o.answered;
  unanswered += o.unanswered;
  acquired += o.acquired;
  completes_acknowledged += o.completes_acknowledged;
  releases += o.releases;
  extends += o.extends;
  redeliveries += o.redeliveries;
  retries += o.retries;
}

std::string OracleKey(const std::string& ns, const std::string& key) {
  return absl::StrCat(ns, std::string(1, kSeparator), key);
}

void SplitOracleKey(const std::string& name, std::string* ns, std::string* key) {
  const size_t at = name.find(kSeparator);
  *ns = name.substr(0, at);
  *key = name.substr(at + 1);
}

// One worker's loop and what it counted.
class MixedLoad::Worker {
 public:
  Worker(MixedLoad* load, int index)
      : load_(load),
        rng_(load->seed_ * 1000 + static_cast<uint64_t>(index)),
        name_(absl::StrCat(load->prefix_, "-w", index)) {}

  void Run() {
    for (int i = 0; !load_->stop_.load(); ++i) {
      const uint64_t dice = rng_() % 100;
      bool ok = true;
      if (dice < 45) {
        ok = FreshKey(i);
      } else if (dice < 60) {
        ok = Redeliver(i);
      } else if (dice < 75) {
        ok = RetryUnfinished(i);
      } else {
        ok = FreshBatch(i);
      }
      if (!ok) break;
      if (load_->pause_us_ > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(load_->pause_us_));
      }
    }
    absl::MutexLock lock(&load_->mu_);
    load_->counts_.Add(counts_);
    load_->acknowledged_.insert(load_->acknowledged_.end(), acknowledged_.begin(),
                                acknowledged_.end());
  }

 private:
  Mode RandomMode() {
    const uint64_t dice = rng_() % 4;
    return dice < 2 ? Mode::kUnary : (dice == 2 ? Mode::kBatch : Mode::kStream);
  }
  const Policy& RandomPolicy() { return Policies()[rng_() % Policies().size()]; }

  // Sends `ops` and passes each answer through the oracle. False when any
  // went unanswered.
  bool Send(const std::vector<storage::Operation>& ops, std::vector<Answer>* out = nullptr) {
    ExpectedState& oracle = *load_->oracle_;
    for (const storage::Operation& op : ops) {
      if (const auto* complete = std::get_if<storage::CompleteOp>(&op)) {
        oracle.CompleteSent(OracleKey(complete->ns, complete->key), complete->token,
                            complete->result);
      }
    }
    const uint64_t sent = oracle.Tick();
    const Mode mode = RandomMode();
    ++counts_.calls[static_cast<int>(mode)];
    const std::vector<Answer> answers = load_->target_->Apply(ops, mode);
    bool all = true;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Answer& a = answers[i];
      if (!a.answered) {
        ++counts_.unanswered;
        all = false;
        continue;
      }
      ++counts_.answered;
      load_->answered_.fetch_add(1);
      Observe(ops[i], a, sent);
    }
    if (out != nullptr) *out = answers;
    return all;
  }

  void Observe(const storage::Operation& op, const Answer& a, uint64_t sent) {
    ExpectedState& oracle = *load_->oracle_;
    const std::string name = OracleKey(storage::OpNamespace(op), storage::OpKey(op));
    if (const auto* claim = std::get_if<storage::ClaimOp>(&op)) {
      if (a.outcome == Outcome::kAcquired) {
        ++counts_.acquired;
        oracle.Acquired(name, claim->owner, a.token, sent);
      } else if (a.outcome == Outcome::kCompleted) {
        oracle.SawCompleted(name, a.token, a.result);
      } else {
        oracle.SawNotCompleted(name, absl::StrCat("Claim answered ", OutcomeName(a.outcome)), sent);
      }
    } else if (const auto* complete = std::get_if<storage::CompleteOp>(&op)) {
      if (a.outcome == Outcome::kOk || a.outcome == Outcome::kAlreadyCompleted) {
        ++counts_.completes_acknowledged;
        oracle.CompleteAcknowledged(name, complete->token, complete->result);
        acknowledged_.push_back(name);
      }
    } else if (std::holds_alternative<storage::ReleaseOp>(op)) {
      ++counts_.releases;
    } else if (std::holds_alternative<storage::ExtendOp>(op)) {
      ++counts_.extends;
    }
  }

  storage::CompleteOp CompleteOf(const storage::ClaimOp& claim, uint64_t token) {
    storage::CompleteOp op;
    op.ns = claim.ns;
    op.key = claim.key;
    op.token = token;
    op.result = ResultFor(claim.key, token);
    op.retention_ms = kRetentionMs;
    return op;
  }

  // Claims a fresh key, then completes, releases, extends and completes,
  // or leaves it.
  bool FreshKey(int i) {
    const Policy& p = RandomPolicy();
    const storage::ClaimOp claim =
        ClaimOf(p, absl::StrCat(name_, "-", i), absl::StrCat(name_, "-o", i));
    std::vector<Answer> answers;
    if (!Send({claim}, &answers)) return false;
    if (answers[0].outcome != Outcome::kAcquired) return true;
    const uint64_t token = answers[0].token;
    const uint64_t dice = rng_() % 100;
    if (dice < 60) return Send({CompleteOf(claim, token)});
    if (dice < 75) {
      storage::ReleaseOp release;
      release.ns = claim.ns;
      release.key = claim.key;
      release.token = token;
      release.max_attempts = p.max_attempts;
      release.failed_retention_ms = kRetentionMs;
      return Send({release});
    }
    if (dice < 90) {
      storage::ExtendOp extend;
      extend.ns = claim.ns;
      extend.key = claim.key;
      extend.token = token;
      extend.lease_ms = p.lease_ms;
      return Send({extend}) && Send({CompleteOf(claim, token)});
    }
    return true;  // Left IN_PROGRESS: its lease lapses, someone retries it.
  }

  // A redelivery of a completed message: must answer COMPLETED.
  bool Redeliver(int i) {
    const std::vector<std::string> names = load_->oracle_->SampleAcknowledged(1, rng_);
    if (names.empty()) return FreshKey(i);
    std::string ns, key;
    SplitOracleKey(names[0], &ns, &key);
    ++counts_.redeliveries;
    return Send({ClaimOf(PolicyOf(ns), key, absl::StrCat(name_, "-d", i))});
  }

  // A new owner retries a key nobody completed (released, left, or its
  // Complete unanswered); if it wins, it completes.
  bool RetryUnfinished(int i) {
    const std::vector<std::string> names = load_->oracle_->SampleUnfinished(1, rng_);
    if (names.empty()) return FreshKey(i);
    std::string ns, key;
    SplitOracleKey(names[0], &ns, &key);
    ++counts_.retries;
    const storage::ClaimOp claim = ClaimOf(PolicyOf(ns), key, absl::StrCat(name_, "-r", i));
    std::vector<Answer> answers;
    if (!Send({claim}, &answers)) return false;
    if (answers[0].outcome != Outcome::kAcquired) return true;
    return Send({CompleteOf(claim, answers[0].token)});
  }

  // Several fresh keys claimed in one call, then completed in one call.
  bool FreshBatch(int i) {
    const int n = 2 + static_cast<int>(rng_() % 5);
    std::vector<storage::Operation> claims;
    for (int k = 0; k < n; ++k) {
      claims.push_back(ClaimOf(RandomPolicy(), absl::StrCat(name_, "-", i, "b", k),
                               absl::StrCat(name_, "-o", i, "b", k)));
    }
    std::vector<Answer> answers;
    if (!Send(claims, &answers)) return false;
    std::vector<storage::Operation> completes;
    for (int k = 0; k < n; ++k) {
      if (answers[k].outcome != Outcome::kAcquired) continue;
      completes.push_back(CompleteOf(std::get<storage::ClaimOp>(claims[k]), answers[k].token));
    }
    return completes.empty() || Send(completes);
  }

  MixedLoad* const load_;
  std::mt19937_64 rng_;
  const std::string name_;
  LoadCounts counts_;
  std::vector<std::string> acknowledged_;
};

MixedLoad::MixedLoad(Target* target, ExpectedState* oracle, std::string prefix, int workers,
                     uint64_t seed, int64_t pause_us)
    : target_(target),
      oracle_(oracle),
      prefix_(std::move(prefix)),
      seed_(seed),
      pause_us_(pause_us) {
  running_ = workers;
  for (int w = 0; w < workers; ++w) {
    threads_.emplace_back([this, w] {
      Worker(this, w).Run();
      --running_;
    });
  }
}

MixedLoad::~MixedLoad() {
  Stop();
  Join();
}

void MixedLoad::Join() {
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

LoadCounts MixedLoad::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

std::vector<std::string> MixedLoad::acknowledged() const {
  absl::MutexLock lock(&mu_);
  return acknowledged_;
}

size_t ReadBack(Target* target, ExpectedState* oracle, const std::vector<std::string>& names) {
  size_t unanswered = 0;
  for (size_t from = 0; from < names.size(); from += 100) {
    std::vector<storage::Operation> queries;
    for (size_t i = from; i < names.size() && i < from + 100; ++i) {
      storage::QueryOp q;
      SplitOracleKey(names[i], &q.ns, &q.key);
      queries.push_back(q);
    }
    const uint64_t sent = oracle->Tick();
    const std::vector<Answer> answers = target->Apply(queries, Mode::kBatch);
    for (size_t i = 0; i < queries.size(); ++i) {
      const Answer& a = answers[i];
      const std::string& name = names[from + i];
      if (!a.answered) {
        ++unanswered;
      } else if (a.state == storage::State::kCompleted) {
        oracle->SawCompleted(name, a.token, a.result);
      } else {
        oracle->SawNotCompleted(name, "Query after restart did not find it COMPLETED", sent);
      }
    }
  }
  return unanswered;
}

}  // namespace dedup::campaign
