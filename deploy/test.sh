#!/usr/bin/env bash
# On a fresh Debian 12 machine: installs what dedupd needs, builds it with
# its tests with GCC and again with clang (-Wthread-safety -Werror), and runs
# the whole suite (ctest). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
bash deploy/build.sh
# The clang build checks the thread-safety annotations (and fails on any
# warning) before the suite spends its minutes.
bash deploy/build-clang.sh
cd "${DEDUP_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 300
