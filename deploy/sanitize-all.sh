#!/usr/bin/env bash
# Every sanitizer run, one after the other, each in its own build tree:
#   1. storage_test and server_test under ASan+UBSan (deploy/build-sanitizers.sh, ./build-asan);
#   2. storage_test, server_test and client_test whole under TSan
#      (deploy/build-tsan.sh --full, ./build-tsan);
#   3. the replication and shard-move tests against three-node clusters of
#      a TSan dedupd (deploy/build-tsan.sh --replicated, ./build-tsan);
#   4. the fuzz harnesses under ASan+UBSan, replaying every committed corpus
#      (deploy/build-fuzzers.sh, ./build-fuzz).
# Three clang builds of most of the tree: expect the better part of an hour
# on two cores the first time. Exits non-zero if any of them failed, after
# running all four.
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
for step in "deploy/build-sanitizers.sh" "deploy/build-tsan.sh --full" \
  "deploy/build-tsan.sh --replicated" "deploy/build-fuzzers.sh"; do
  echo "=== $step"
  # shellcheck disable=SC2086
  bash $step || { echo "=== $step failed"; status=1; }
done
exit "$status"
