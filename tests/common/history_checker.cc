#include "tests/common/history_checker.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dedup::test {
namespace {

using Answer = HistoryOp::Answer;
using Kind = HistoryOp::Kind;

std::string Describe(const HistoryOp& op) {
  return absl::StrCat(op.kind == Kind::kClaim ? "Claim" : "Complete", " by ", op.owner, " token ",
                      op.token, " [", op.invoked, "..", op.returned, "]");
}

bool IsAcknowledgedCompletion(const HistoryOp& op) {
  return op.kind == Kind::kComplete &&
         (op.answer == Answer::kOk || op.answer == Answer::kAlreadyCompleted);
}

// The promises of one key, over that key's calls.
void CheckKey(const std::string& key, const std::vector<const HistoryOp*>& ops,
              std::vector<std::string>* violations) {
  auto violation = [&](const std::string& what) {
    violations->push_back(absl::StrCat(key, ": ", what));
  };
  std::vector<const HistoryOp*> acquired;
  std::vector<const HistoryOp*> completions;  // Acknowledged.
  std::map<uint64_t, std::string> owner_of_token;
  std::set<std::pair<uint64_t, std::string>> completes_sent;  // (token, result)
  std::set<uint64_t> completed_ok;
  for (const HistoryOp* op : ops) {
    if (op->kind == Kind::kClaim && op->answer == Answer::kAcquired) {
      acquired.push_back(op);
      auto [it, inserted] = owner_of_token.emplace(op->token, op->owner);
      if (!inserted && it->second != op->owner) {
        violation(absl::StrCat("token ", op->token, " was ACQUIRED by ", it->second, " and by ",
                               op->owner));
      }
    }
    if (op->kind == Kind::kComplete) completes_sent.emplace(op->token, op->result);
    if (IsAcknowledgedCompletion(*op)) completions.push_back(op);
    if (op->kind == Kind::kComplete && op->answer == Answer::kOk) completed_ok.insert(op->token);
  }

  // 2. Tokens grow along real time.
  for (const HistoryOp* a : acquired) {
    for (const HistoryOp* b : acquired) {
      if (a == b || a->returned >= b->invoked) continue;
      const bool same_holder = a->owner == b->owner;
      if (b->token < a->token || (!same_holder && b->token == a->token)) {
        violation(absl::StrCat("token did not grow: ", Describe(*a), " answered before ",
                               Describe(*b), " was sent"));
      }
    }
  }

  // 3. Completions stick.
  for (const HistoryOp* c : completions) {
    for (const HistoryOp* op : ops) {
      if (op->kind != Kind::kClaim || op->answer == Answer::kNone || op->invoked <= c->returned) {
        continue;
      }
      if (op->answer != Answer::kCompleted) {
        violation(absl::StrCat("acknowledged completion lost: ", Describe(*c), " answered before ",
                               Describe(*op), " which was not COMPLETED"));
      } else if (op->token != c->token || op->result != c->result) {
        violation(absl::StrCat(Describe(*op), " replayed token ", op->token, " result '",
                               op->result, "' after ", Describe(*c), " with result '", c->result,
                               "' was acknowledged"));
      }
    }
  }

  // 4. Nothing is made up.
  for (const HistoryOp* op : ops) {
    if (op->kind == Kind::kClaim && op->answer == Answer::kCompleted &&
        completes_sent.count({op->token, op->result}) == 0) {
      violation(absl::StrCat(Describe(*op), " answered COMPLETED with token ", op->token,
                             " and result '", op->result, "' that no Complete sent"));
    }
    if (op->kind == Kind::kComplete && op->answer == Answer::kOk &&
        owner_of_token.count(op->token) == 0) {
      violation(absl::StrCat(Describe(*op), " was answered OK for a token no claim acquired"));
    }
  }

  // 5. One completion.
  if (completed_ok.size() > 1) {
    violation(absl::StrCat(completed_ok.size(), " different tokens were answered OK to Complete"));
  }
}

}  // namespace

std::vector<std::string> CheckHistory(const std::vector<HistoryOp>& history) {
  std::map<std::string, std::vector<const HistoryOp*>> by_key;
  for (const HistoryOp& op : history) by_key[op.key].push_back(&op);
  std::vector<std::string> violations;
  for (const auto& [key, ops] : by_key) CheckKey(key, ops, &violations);
  return violations;
}

}  // namespace dedup::test
