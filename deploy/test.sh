#!/usr/bin/env bash
# On a fresh Debian 12 machine: installs what dedupd needs, builds it with
# its tests with GCC and again with clang (-Wthread-safety -Werror), replays
# the fuzz corpora and runs the whole suite (ctest). DEDUP_CI_TSAN=1 adds the
# race tests under ThreadSanitizer. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
bash deploy/build.sh
# The clang build checks the thread-safety annotations (and fails on any
# warning) before the suite spends its minutes.
bash deploy/build-clang.sh
# Every committed fuzz input, seeds and reproducers of past findings,
# through its harness once (seconds; the harnesses come from the clang build).
(cd "${DEDUP_CLANG_BUILD_DIR:-build-clang}" && ctest --output-on-failure -L fuzz)
# The race tests under ThreadSanitizer: a third build, so only on request
# (11.5 minutes more on two shared cores, measured; see README, Reliability).
if [ "${DEDUP_CI_TSAN:-0}" = 1 ]; then
  bash deploy/build-tsan.sh
fi
cd "${DEDUP_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 300
