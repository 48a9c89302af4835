#include "tests/blackbox/claim_complete_load.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dedup::blackbox {

std::string ResultFor(const std::string& key) {
  return absl::StrCat(std::string("receipt\0\xff", 9), key);
}

ClaimCompleteLoad::ClaimCompleteLoad(std::shared_ptr<grpc::Channel> channel, Options options)
    : options_(std::move(options)), client_(std::move(channel)) {
  running_.store(options_.writers);
  for (int w = 0; w < options_.writers; ++w) {
    threads_.emplace_back([this, w] { RunWriter(w); });
  }
}

ClaimCompleteLoad::~ClaimCompleteLoad() {
  Stop();
  Join();
}

void ClaimCompleteLoad::Join() {
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

void ClaimCompleteLoad::LogFailure(const std::string& what, const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (server_loss_expected_.load()) {
    interruptions_.push_back(status);
  } else {
    unexpected_.push_back(
        absl::StrCat(what, " failed: code ", status.error_code(), " ", status.error_message()));
  }
}

void ClaimCompleteLoad::RunWriter(int writer) {
  const std::string owner = absl::StrCat("writer-", writer);
  for (int i = 0; !stop_.load(); ++i) {
    KeyLog log;
    log.key = absl::StrCat("writer-", writer, "/key-", i);
    log.owner = owner;
    v1::ClaimResponse claim;
    grpc::Status status = client_.Claim(options_.ns, log.key, owner, options_.lease_ms, &claim);
    if (!status.ok()) {
      LogFailure("Claim " + log.key, status);
      break;
    }
    if (claim.outcome() != v1::ClaimResponse::ACQUIRED) {
      absl::MutexLock lock(&mu_);
      unexpected_.push_back(absl::StrCat("Claim of fresh key ", log.key, " answered ",
                                         v1::ClaimResponse::Outcome_Name(claim.outcome())));
      break;
    }
    log.token = claim.token();
    if (options_.claim_only_every > 0 && i % options_.claim_only_every == 0) {
      log.fate = KeyFate::kClaimedOnly;
      absl::MutexLock lock(&mu_);
      keys_.push_back(std::move(log));
      continue;
    }
    log.result = ResultFor(log.key);
    v1::CompleteResponse complete;
    status = client_.Complete(options_.ns, log.key, log.token, log.result, &complete);
    if (!status.ok()) {
      LogFailure("Complete " + log.key, status);
      log.fate = KeyFate::kCompleteUnanswered;
      absl::MutexLock lock(&mu_);
      keys_.push_back(std::move(log));
      break;
    }
    if (complete.outcome() != v1::CompleteResponse::OK) {
      absl::MutexLock lock(&mu_);
      unexpected_.push_back(absl::StrCat("Complete of ", log.key, " with its token ", log.token,
                                         " answered ",
                                         v1::CompleteResponse::Outcome_Name(complete.outcome())));
      break;
    }
    log.fate = KeyFate::kCompleted;
    {
      absl::MutexLock lock(&mu_);
      keys_.push_back(std::move(log));
    }
    acknowledged_.fetch_add(1);
  }
  running_.fetch_sub(1);
}

std::vector<KeyLog> ClaimCompleteLoad::Keys() const {
  absl::MutexLock lock(&mu_);
  return keys_;
}

std::vector<std::string> ClaimCompleteLoad::Unexpected() const {
  absl::MutexLock lock(&mu_);
  return unexpected_;
}

std::vector<grpc::Status> ClaimCompleteLoad::Interruptions() const {
  absl::MutexLock lock(&mu_);
  return interruptions_;
}

std::vector<std::string> CheckCompletedReadBack(DedupClient& client, const std::string& ns,
                                                const std::vector<KeyLog>& keys) {
  std::vector<std::string> problems;
  for (const KeyLog& log : keys) {
    if (log.fate != KeyFate::kCompleted) continue;
    v1::Record record;
    grpc::Status status = client.Query(ns, log.key, &record);
    if (!status.ok()) {
      problems.push_back(absl::StrCat("Query ", log.key, " failed: code ", status.error_code(), " ",
                                      status.error_message()));
    } else if (record.state() != v1::STATE_COMPLETED) {
      problems.push_back(absl::StrCat("acknowledged ", log.key, " reads as ",
                                      v1::RecordState_Name(record.state())));
    } else if (record.result() != log.result || record.token() != log.token) {
      problems.push_back(absl::StrCat("acknowledged ", log.key, " reads back token ",
                                      record.token(), " result \"", absl::CEscape(record.result()),
                                      "\"; acknowledged token ", log.token, " result \"",
                                      absl::CEscape(log.result), "\""));
    }
  }
  return problems;
}

std::string FirstLines(const std::vector<std::string>& lines, size_t n) {
  std::string text;
  for (size_t i = 0; i < lines.size() && i < n; ++i) absl::StrAppend(&text, lines[i], "\n");
  if (lines.size() > n) absl::StrAppend(&text, "... and ", lines.size() - n, " more\n");
  return text;
}

}  // namespace dedup::blackbox
