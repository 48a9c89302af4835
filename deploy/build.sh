#!/usr/bin/env bash
# Configures and builds dedupd in ./build (incremental on later runs).
#   deploy/build.sh            everything, tests included
#   deploy/build.sh dedupd     just the named targets
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${DEDUP_BUILD_DIR:-build}"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEDUP_WERROR=ON
fi
# gRPC-generated code is memory-hungry to compile: one job per core.
cmake --build "$build_dir" --parallel "$(nproc)" ${1:+--target "$@"}
