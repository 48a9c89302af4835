#!/usr/bin/env bash
# A second build of the whole tree, tests included, with clang in
# ./build-clang: -Wall -Wextra -Wthread-safety -Werror, so the locking
# annotations are checked and no warning slips in. Unoptimized, because it
# exists for its diagnostics; the tests run from the GCC build. It also
# builds the libFuzzer harnesses (tests/fuzz/, without sanitizers), so that
# deploy/test.sh can replay their committed corpora (ctest -L fuzz).
#   deploy/build-clang.sh            configure if needed, then build
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${DEDUP_CLANG_BUILD_DIR:-build-clang}"
command -v clang++ >/dev/null || { echo "clang++ not found (deploy/install-deps.sh installs it)" >&2; exit 1; }
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O0" -DDEDUP_WERROR=ON -DDEDUP_BUILD_FUZZERS=ON
elif ! grep -q '^DEDUP_BUILD_FUZZERS:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  cmake "$build_dir" -DDEDUP_BUILD_FUZZERS=ON >/dev/null  # A tree configured before the fuzzers.
fi
cmake --build "$build_dir" --parallel "$(nproc)"
