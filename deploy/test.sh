#!/usr/bin/env bash
# On a fresh Debian 12 machine: installs what dedupd needs, builds it with
# its tests and runs the whole suite (ctest). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
bash deploy/build.sh
cd "${DEDUP_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 300
