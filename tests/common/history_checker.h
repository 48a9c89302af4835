#ifndef DEDUP_TESTS_COMMON_HISTORY_CHECKER_H_
#define DEDUP_TESTS_COMMON_HISTORY_CHECKER_H_

// A checker of recorded histories (the Jepsen idea, small): many clients
// call dedupd concurrently, each records what it sent, what it was answered
// and when, and the checker decides whether any interleaving of those calls
// broke what dedupd promises. Tests that crash, pause or fail over servers
// under load run it over everything they recorded.
//
// The promises checked, per key (design.md §2–§4):
//   1. One holder per token: every ACQUIRED answer with the same token names
//      the same owner.
//   2. Tokens grow: if one ACQUIRED answer arrived before another claim of
//      the key was sent, and that claim was ACQUIRED too, its token is not
//      smaller, and strictly larger when the owner differs.
//   3. Completions stick: once a Complete was answered OK or
//      ALREADY_COMPLETED, every Claim of the key sent afterwards answers
//      COMPLETED with that token and result (retention is assumed to
//      outlast the history).
//   4. Nothing is made up: a COMPLETED answer carries a token and result
//      that some Complete of the key sent, and a Complete answered OK used a
//      token some claim was answered ACQUIRED with.
//   5. One completion: at most one token of a key is answered OK to a
//      Complete.
// A call with no answer (timeout, UNAVAILABLE, connection lost) may or may
// not have taken effect; the checker allows both.

#include <cstdint>
#include <string>
#include <vector>

namespace dedup::test {

// One call as the client saw it.
struct HistoryOp {
  enum class Kind { kClaim, kComplete };
  enum class Answer {
    kNone,  // No answer: it may or may not have happened.
    kAcquired,
    kInProgress,
    kCompleted,
    kFailed,
    kMismatch,
    kOk,
    kAlreadyCompleted,
    kStaleToken,
    kNotFound,
  };

  Kind kind = Kind::kClaim;
  std::string key;  // Namespace and key, as one string.
  std::string owner;
  // Claim: the token answered (ACQUIRED or COMPLETED). Complete: the token
  // sent.
  uint64_t token = 0;
  // Claim answered COMPLETED: the stored result. Complete: the result sent.
  std::string result;
  // When the call was sent and when its answer arrived, on one monotonic
  // clock shared by every client of the history (any unit).
  int64_t invoked = 0;
  int64_t returned = 0;
  Answer answer = Answer::kNone;
};

// Every violation of the promises above, one line each naming the key and
// the calls involved; empty when the history is consistent.
std::vector<std::string> CheckHistory(const std::vector<HistoryOp>& history);

}  // namespace dedup::test

#endif  // DEDUP_TESTS_COMMON_HISTORY_CHECKER_H_
