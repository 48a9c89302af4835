#!/usr/bin/env bash
# On a fresh Debian 12 machine: installs what dedupd needs, builds it with
# its tests with GCC, compiles it again with clang (-Wthread-safety -Werror;
# deploy/build-clang.sh), replays the fuzz corpora and runs the whole suite
# (ctest). Meanwhile it makes the container image's base and runtime stage.
# DEDUP_CI_TSAN=1 adds the race tests under ThreadSanitizer. Exits non-zero
# on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# How long each step took, so that a slow run shows where its time went.
step_start=$SECONDS
step_done() {
  echo "test.sh: $1 in $((SECONDS - step_start)) s ($SECONDS s in all)"
  step_start=$SECONDS
}

bash deploy/install-deps.sh
step_done "installed what the build needs"
# The container image check (ctest container_image) needs the debian:12
# base and the image's runtime stage: made meanwhile, mostly waiting on
# Debian's archive, so the check later only copies the binaries in.
image_log="$(mktemp)"
image_warm=""
if command -v podman >/dev/null; then
  bash deploy/build-image.sh --warm >"$image_log" 2>&1 &
  image_warm=$!
fi
bash deploy/build.sh
step_done "built with GCC"
# The clang build checks the thread-safety annotations (and fails on any
# warning) before the suite spends its minutes.
bash deploy/build-clang.sh
step_done "compiled with clang"
# Every committed fuzz input, seeds and reproducers of past findings,
# through its harness once (seconds; the harnesses come from the clang build).
(cd "${DEDUP_CLANG_BUILD_DIR:-build-clang}" && ctest --output-on-failure -L fuzz)
step_done "replayed the fuzz inputs"
# The race tests under ThreadSanitizer: a third build, so only on request
# (11.5 minutes more on two shared cores, measured; see README, Reliability).
if [ "${DEDUP_CI_TSAN:-0}" = 1 ]; then
  bash deploy/build-tsan.sh
  step_done "ran the race tests under ThreadSanitizer"
fi
if [ -n "$image_warm" ] && ! wait "$image_warm"; then
  # Not fatal here: container_image fails with the reason if it persists.
  echo "test.sh: warming the image's base and runtime stage failed:" >&2
  tail -n 20 "$image_log" >&2
fi
rm -f "$image_log"
step_done "waited for the image's base"
cd "${DEDUP_BUILD_DIR:-build}"
# The replication core's rules and simulations are pure computation with
# no clock, ports or processes, and the storage tests use temp directories
# alone: they run two at a time. Everything else runs one at a time, since
# process tests measure time and share ports.
ctest --output-on-failure --timeout 300 -L simulation -j "$(nproc)"
step_done "ran the simulation tests"
ctest --output-on-failure --timeout 300 -L storage -j "$(nproc)"
step_done "ran the storage tests"
ctest --output-on-failure --timeout 300 -LE 'simulation|storage'
step_done "ran the rest of the suite"
