#!/usr/bin/env bash
# The libFuzzer harnesses of tests/fuzz/, with the code they drive, under
# AddressSanitizer and UndefinedBehaviorSanitizer: a clang build in
# ./build-fuzz (-DDEDUP_BUILD_FUZZERS=ON), then the replay of every committed
# corpus (ctest -L fuzz).
#   deploy/build-fuzzers.sh                 configure if needed, build, replay the corpora
#   deploy/build-fuzzers.sh --build-only    configure if needed and build
#   deploy/build-fuzzers.sh --fuzz NAME [libFuzzer flags]
#        build only harness NAME and fuzz it, e.g.
#        --fuzz fuzz_record_codec -runs=10000000. New
#        inputs go to build-fuzz/corpus/NAME (seeded from the committed corpus),
#        and a crash to build-fuzz/crash-*; add a reproducer to
#        tests/fuzz/corpus/NAME/ once it is fixed. tests/fuzz/NAME.dict, if
#        present, is passed as the dictionary.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${DEDUP_FUZZ_BUILD_DIR:-build-fuzz}"
command -v clang++ >/dev/null || { echo "clang++ not found (deploy/install-deps.sh installs it)" >&2; exit 1; }
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g -fsanitize=fuzzer-no-link $sanitize" \
    -DCMAKE_EXE_LINKER_FLAGS="$sanitize" -DDEDUP_WERROR=ON -DDEDUP_BUILD_FUZZERS=ON
fi
target=dedup_fuzzers
[ "${1:-}" = --fuzz ] && target="${2:?usage: $0 --fuzz NAME [libFuzzer flags]}"
cmake --build "$build_dir" --parallel "$(nproc)" --target "$target"

export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
case "${1:-}" in
  --build-only) exit 0 ;;
  --fuzz)
    name="${2:?usage: $0 --fuzz NAME [libFuzzer flags]}"
    shift 2
    mkdir -p "$build_dir/corpus/$name"
    dict=()
    [ -f "tests/fuzz/$name.dict" ] && dict=("-dict=$PWD/tests/fuzz/$name.dict")
    cd "$build_dir"
    exec "tests/fuzz/$name" -artifact_prefix=./ "${dict[@]}" "$@" "corpus/$name" \
      "../tests/fuzz/corpus/$name"
    ;;
  "") ;;
  *) echo "usage: $0 [--build-only | --fuzz NAME [libFuzzer flags]]" >&2; exit 2 ;;
esac
cd "$build_dir"
ctest --output-on-failure -L fuzz
