#include "storage/lifecycle.h"

#include <utility>

namespace dedup::storage {
namespace {

bool FingerprintsDiffer(const std::string& stored, const std::string& given) {
  return !stored.empty() && !given.empty() && stored != given;
}

// The record as a reader sees it now: effective state applied.
Record Visible(const Record& record, int64_t now_ms) {
  Record out = record;
  out.state = EffectiveState(record, now_ms);
  return out;
}

Record KeyOnly(const std::string& ns, const std::string& key) {
  Record record;
  record.ns = ns;
  record.key = key;
  return record;
}

Transition Answer(Outcome outcome, Record record) {
  Transition t;
  t.result.outcome = outcome;
  t.result.record = std::move(record);
  return t;
}

Transition Store(Outcome outcome, Record record) {
  Transition t = Answer(outcome, record);
  t.write = true;
  t.stored = std::move(record);
  return t;
}

Record Poisoned(Record record, int64_t now_ms, int64_t retention_ms) {
  record.state = State::kFailed;
  record.lease_expires_ms = 0;
  record.retention_expires_ms = now_ms + retention_ms;
  record.updated_ms = now_ms;
  return record;
}

absl::StatusOr<Transition> DecideClaim(const ClaimOp& op, const std::optional<Record>& current,
                                       int64_t now_ms, TokenSource next_token) {
  const State state = current ? EffectiveState(*current, now_ms) : State::kAbsent;
  // A lapsed retention forgets the key entirely; a lapsed lease does not.
  const bool history = current && (state != State::kAbsent || current->state == State::kInProgress);
  if (history && FingerprintsDiffer(current->fingerprint, op.fingerprint)) {
    return Answer(Outcome::kMismatch, Visible(*current, now_ms));
  }
  switch (state) {
    case State::kInProgress:
      // Re-entrant only for the same owner and, with authentication, the
      // same identity: a caller naming another's owner learns nothing.
      if (current->owner == op.owner && (op.identity.empty() || current->holder == op.identity)) {
        return Answer(Outcome::kAcquired, *current);
      }
      return Answer(Outcome::kInProgress, *current);
    case State::kCompleted:
      return Answer(Outcome::kCompleted, *current);
    case State::kFailed:
      return Answer(Outcome::kFailed, *current);
    case State::kAbsent:
    case State::kReleased:
      break;
  }

  const bool takeover = history && state == State::kAbsent;
  if (takeover && current->attempts >= op.max_attempts) {
    Transition t = Store(Outcome::kFailed, Poisoned(*current, now_ms, op.failed_retention_ms));
    t.result.poisoned = true;
    return t;
  }
  absl::StatusOr<uint64_t> token = next_token();
  if (!token.ok()) return token.status();

  Record next;
  if (history) {
    next = *current;
  } else {
    next.ns = op.ns;
    next.key = op.key;
    next.created_ms = now_ms;
  }
  next.state = State::kInProgress;
  next.owner = op.owner;
  next.holder = op.identity;
  next.token = *token;
  if (next.fingerprint.empty()) next.fingerprint = op.fingerprint;
  next.lease_expires_ms = now_ms + op.lease_ms;
  next.retention_expires_ms = 0;
  next.attempts += 1;
  next.updated_ms = now_ms;
  next.completed_ms = 0;
  next.result.clear();
  Transition t = Store(Outcome::kAcquired, std::move(next));
  t.result.takeover = takeover;
  return t;
}

// Shared gate of Complete, Release and Extend: the token must be the newest
// one and the record must still be IN_PROGRESS (live or lapsed).
bool HoldsClaim(const Record& record, uint64_t token) {
  return record.state == State::kInProgress && record.token == token;
}

// With authentication, the newest token is usable only by the identity that
// took it: tokens count up per key, so knowing one proves nothing. A claim
// taken without authentication (no holder) stays usable by its token alone.
bool ForeignToken(const Record& record, uint64_t token, const std::string& identity) {
  return !identity.empty() && !record.holder.empty() && record.token == token &&
         record.holder != identity;
}

// The answer to another identity's use of the holder's token: exactly the
// answer to any token that is not the newest, so that guessing tokens
// cannot tell the live one (design.md §10). Flagged for the denial metric.
Transition ForeignTokenAnswer(const Record& record, int64_t now_ms) {
  Transition t = Answer(Outcome::kStaleToken, Visible(record, now_ms));
  t.result.foreign_token = true;
  return t;
}

absl::StatusOr<Transition> DecideComplete(const CompleteOp& op,
                                          const std::optional<Record>& current, int64_t now_ms) {
  const State state = current ? EffectiveState(*current, now_ms) : State::kAbsent;
  if (!current || (state == State::kAbsent && current->state != State::kInProgress)) {
    return Answer(Outcome::kNotFound, KeyOnly(op.ns, op.key));
  }
  if (ForeignToken(*current, op.token, op.identity)) return ForeignTokenAnswer(*current, now_ms);
  if (state == State::kCompleted && current->token == op.token) {
    return Answer(Outcome::kAlreadyCompleted, *current);
  }
  if (!HoldsClaim(*current, op.token)) {
    return Answer(Outcome::kStaleToken, Visible(*current, now_ms));
  }
  Record next = *current;
  next.state = State::kCompleted;
  next.lease_expires_ms = 0;
  next.retention_expires_ms = now_ms + op.retention_ms;
  next.updated_ms = now_ms;
  next.completed_ms = now_ms;
  next.result = op.result;
  return Store(Outcome::kOk, std::move(next));
}

absl::StatusOr<Transition> DecideRelease(const ReleaseOp& op, const std::optional<Record>& current,
                                         int64_t now_ms) {
  const State state = current ? EffectiveState(*current, now_ms) : State::kAbsent;
  if (!current || (state == State::kAbsent && current->state != State::kInProgress)) {
    return Answer(Outcome::kNotFound, KeyOnly(op.ns, op.key));
  }
  if (ForeignToken(*current, op.token, op.identity)) return ForeignTokenAnswer(*current, now_ms);
  if (current->token == op.token && state == State::kReleased) {
    return Answer(Outcome::kOk, *current);  // A retry of this release.
  }
  if (current->token == op.token && state == State::kFailed) {
    return Answer(Outcome::kFailed, *current);  // A retry of the poisoning release.
  }
  if (!HoldsClaim(*current, op.token)) {
    return Answer(Outcome::kStaleToken, Visible(*current, now_ms));
  }
  if (current->attempts >= op.max_attempts) {
    Transition t = Store(Outcome::kFailed, Poisoned(*current, now_ms, op.failed_retention_ms));
    t.result.poisoned = true;
    return t;
  }
  Record next = *current;
  next.state = State::kReleased;
  // The abandoned-record grace of compaction counts from here.
  next.lease_expires_ms = now_ms;
  next.updated_ms = now_ms;
  return Store(Outcome::kOk, std::move(next));
}

absl::StatusOr<Transition> DecideExtend(const ExtendOp& op, const std::optional<Record>& current,
                                        int64_t now_ms) {
  const State state = current ? EffectiveState(*current, now_ms) : State::kAbsent;
  if (!current || (state == State::kAbsent && current->state != State::kInProgress)) {
    return Answer(Outcome::kNotFound, KeyOnly(op.ns, op.key));
  }
  if (ForeignToken(*current, op.token, op.identity)) return ForeignTokenAnswer(*current, now_ms);
  if (!HoldsClaim(*current, op.token)) {
    return Answer(Outcome::kStaleToken, Visible(*current, now_ms));
  }
  Record next = *current;
  next.lease_expires_ms = now_ms + op.lease_ms;
  return Store(Outcome::kOk, std::move(next));
}

Transition DecideQuery(const QueryOp& op, const std::optional<Record>& current, int64_t now_ms) {
  if (!current) return Answer(Outcome::kAbsent, KeyOnly(op.ns, op.key));
  Record visible = Visible(*current, now_ms);
  const Outcome outcome = visible.state == State::kAbsent ? Outcome::kAbsent : Outcome::kFound;
  return Answer(outcome, std::move(visible));
}

}  // namespace

absl::StatusOr<Transition> Decide(const Operation& op, const std::optional<Record>& current,
                                  int64_t now_ms, TokenSource next_token) {
  if (const auto* claim = std::get_if<ClaimOp>(&op)) {
    return DecideClaim(*claim, current, now_ms, next_token);
  }
  if (const auto* complete = std::get_if<CompleteOp>(&op)) {
    return DecideComplete(*complete, current, now_ms);
  }
  if (const auto* release = std::get_if<ReleaseOp>(&op)) {
    return DecideRelease(*release, current, now_ms);
  }
  if (const auto* extend = std::get_if<ExtendOp>(&op)) {
    return DecideExtend(*extend, current, now_ms);
  }
  return DecideQuery(std::get<QueryOp>(op), current, now_ms);
}

}  // namespace dedup::storage
