#!/usr/bin/env bash
# A second build with clang in ./build-clang: -Wall -Wextra -Wthread-safety
# -Werror, so the locking annotations are checked and no warning slips in.
# Unoptimized, because it exists for its diagnostics; the tests run from the
# GCC build. It also builds the libFuzzer harnesses (tests/fuzz/, without
# sanitizers), so that deploy/test.sh can replay their committed corpora
# (ctest -L fuzz).
#
# The analysis runs while a file compiles, so this build compiles what
# it has something to say about and links only the fuzz harnesses:
#   - every source outside tests/ (libraries, dedupd, dedupctl, examples, bench);
#   - the test sources that declare locking annotations, or include (directly
#     or through other test headers) a test header that does;
#   - the fuzz harnesses, compiled and linked.
# The other test sources and the test binaries are left to the GCC build,
# which compiles and links all of them with -Werror too.
#
#   deploy/build-clang.sh            configure if needed, then build the above
#   deploy/build-clang.sh --all      every target, tests included
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

all=0
case "${1:-}" in
  "") ;;
  --all) all=1 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac

build_dir="${DEDUP_CLANG_BUILD_DIR:-build-clang}"
command -v clang++ >/dev/null || { echo "clang++ not found (deploy/install-deps.sh installs it)" >&2; exit 1; }
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O0" -DDEDUP_WERROR=ON -DDEDUP_BUILD_FUZZERS=ON
elif ! grep -q '^DEDUP_BUILD_FUZZERS:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  cmake "$build_dir" -DDEDUP_BUILD_FUZZERS=ON >/dev/null  # A tree configured before the fuzzers.
fi
if [ "$all" -eq 1 ]; then
  exec cmake --build "$build_dir" --parallel "$(nproc)"
fi

# Test headers and sources with locking annotations, and the test headers
# that include one of them, until no more are found.
annotation='ABSL_(GUARDED_BY|PT_GUARDED_BY|EXCLUSIVE_LOCKS_REQUIRED|SHARED_LOCKS_REQUIRED|LOCKS_EXCLUDED|ACQUIRED_(AFTER|BEFORE)|(EXCLUSIVE|SHARED|UNLOCK)_(LOCK|TRYLOCK)_FUNCTION|LOCK_RETURNED|ASSERT_(EXCLUSIVE|SHARED)_LOCK|(SCOPED_)?LOCKABLE)\b'
mapfile -t locking < <(grep -rlE "$annotation" tests --include='*.h' --include='*.cc' | sort)
while :; do
  headers=()
  for f in "${locking[@]}"; do [[ "$f" == *.h ]] && headers+=("$f"); done
  [ "${#headers[@]}" -gt 0 ] || break
  includes="$(printf '#include "%s"\n' "${headers[@]}")"
  mapfile -t more < <({ printf '%s\n' "${locking[@]}"
    grep -rlF "$includes" tests --include='*.h' --include='*.cc' || true; } | sort -u)
  [ "${#more[@]}" -eq "${#locking[@]}" ] && break
  locking=("${more[@]}")
done

# The object of every source compiled: outside tests/, in tests/fuzz/, or
# one of the locking test sources, from build.ninja's compile edges.
objects=()
mapfile -t objects < <(printf '%s\n' "${locking[@]}" | grep '\.cc$' | sed "s|^|$repo/|" |
  awk -v repo="$repo/" '
    NR == FNR { locking[$0] = 1; next }
    $1 == "build" && $2 ~ /\.o:$/ && $3 ~ /^CXX_COMPILER__/ {
      source = $4
      if (index(source, repo "tests/") != 1 || index(source, repo "tests/fuzz/") == 1 ||
          (source in locking))
        print substr($2, 1, length($2) - 1)
    }' - "$build_dir/build.ninja")
[ "${#objects[@]}" -gt 0 ] || { echo "build-clang: found nothing to compile in $build_dir/build.ninja" >&2; exit 1; }
tests_compiled="$(printf '%s\n' "${objects[@]}" | grep -c '^tests/' || true)"
echo "build-clang: compiling ${#objects[@]} sources (${tests_compiled} of them under tests/, holding locks) and linking the fuzz harnesses"
cmake --build "$build_dir" --parallel "$(nproc)" --target dedup_fuzzers "${objects[@]}"
