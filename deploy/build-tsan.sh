#!/usr/bin/env bash
# The storage, server and client tests under ThreadSanitizer: a clang build
# in ./build-tsan of storage_test, server_test and client_test, then a run.
#   deploy/build-tsan.sh              configure if needed, build, run the race tests
#   deploy/build-tsan.sh --full       ... and run all three test binaries whole
#   deploy/build-tsan.sh --build-only configure if needed and build
#   deploy/build-tsan.sh --run [test arguments]   run the three binaries with them
#   deploy/build-tsan.sh --replicated [gtest filter]  the replicated path:
#       builds dedupd and replication_test under TSan and runs the
#       replication and shard-move tests (default filter
#       'ReplicationTest.*:ElasticTest.*') against three-node clusters of
#       the TSan dedupd, every node writing its reports to a directory;
#       fails if any process reported. Those tests hold a cluster to
#       timings (2 s leases, a retry budget) that a TSan build, several
#       times slower, may miss: their failures are printed but the verdict
#       is the reports'. Without a filter, two tests at 4 shards run again
#       with TSan's lock-order detector on (off in the first pass, see
#       below).
# The race tests: the concurrency tests of the store, ConcurrentClaim* and
# Stream* of the server, and the client with and without coalescing
# (CoalescedAndUnary/*, but Scan: see the suppressions) with its scheduler.
# deploy/test.sh runs them when DEDUP_CI_TSAN=1.
#
# Debian's libraries are not built with -fsanitize=thread. For most of them
# that costs false reports where they hand work between threads, which
# tests/tsan_suppressions.txt silences by their frames (and explains, with
# what that hides). The race tests run clean with it; the full suites may
# still show such reports, to be read one by one. absl::Mutex is
# different: our own code locks it, and without instrumentation TSan sees
# no lock at all and reports every guarded field. So this script fetches
# Debian's source of the installed libabsl-dev with apt-get source (from the
# Debian archive, through a private source list: the system's apt
# configuration is not touched), compiles absl/synchronization/mutex.cc
# with -fsanitize=thread, and links it whole into each test binary, where it
# takes the place of the library's copy for the binary and for gRPC alike.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${DEDUP_TSAN_BUILD_DIR:-build-tsan}"
command -v clang++ >/dev/null || { echo "clang++ not found (deploy/install-deps.sh installs it)" >&2; exit 1; }
sanitize="-fsanitize=thread -fno-omit-frame-pointer"

# absl::Mutex, instrumented.
absl_dir="$build_dir/absl-tsan"
mutex_lib="$PWD/$absl_dir/libabsl_mutex_tsan.a"
if [ ! -f "$mutex_lib" ]; then
  version="$(dpkg-query -W -f='${Version}' libabsl-dev)"
  rm -rf "$absl_dir" && mkdir -p "$absl_dir/lists/partial"
  (
    cd "$absl_dir"
    echo "deb-src http://deb.debian.org/debian bookworm main" > sources.list
    apt_opts=(-q -o Dir::Etc::sourcelist="$PWD/sources.list" -o Dir::Etc::sourceparts=-
      -o Dir::State::Lists="$PWD/lists")
    apt-get "${apt_opts[@]}" update >/dev/null
    apt-get "${apt_opts[@]}" source --download-only "abseil=$version" >/dev/null
    # apt checked the files against the archive's signed index; the
    # maintainer's own signature needs a keyring this machine may lack.
    dpkg-source -x abseil_*.dsc src >/dev/null 2>&1
    clang++ -std=c++17 -O1 -g $sanitize -c src/absl/synchronization/mutex.cc -o mutex.o
    ar rcs libabsl_mutex_tsan.a mutex.o
  )
fi

# What mutex.o needs from the rest of Abseil (for CMake's compiler check too).
absl_libs="$(pkg-config --libs absl_synchronization)"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g $sanitize" \
    -DCMAKE_EXE_LINKER_FLAGS="$sanitize -Wl,--whole-archive $mutex_lib -Wl,--no-whole-archive $absl_libs" \
    -DDEDUP_WERROR=ON
fi
mode="race"
targets=(storage_test server_test client_test)
if [ "${1:-}" = "--replicated" ]; then
  mode="replicated"
  targets=(dedupd replication_test)
fi
cmake --build "$build_dir" --parallel "$(nproc)" --target "${targets[@]}"

case "${1:-}" in
  --build-only) exit 0 ;;
  --full) mode="full" ;;
  --run) mode="run"; shift ;;
  --replicated) shift ;;
  "") ;;
  *) echo "usage: $0 [--full | --build-only | --run [test arguments] | --replicated [filter]]" >&2
     exit 2 ;;
esac
if [ "$mode" = "replicated" ]; then
  filter="${1:-ReplicationTest.*:ElasticTest.*}"
  # A second pass checks lock order, with tests whose clusters have 4
  # shards (the harness's default): see detect_deadlocks below.
  order_filter="ReplicationTest.LeaderCrash*:ReplicationTest.RollingRestart*"
  reports="$(mktemp -d "${TMPDIR:-/tmp}/tsan-replicated.XXXXXX")"
  tests_status=0
  replicated_pass() {
    local pass_filter="$1" deadlocks="$2"
    # exitcode=0: a node that reported still exits as the tests expect;
    # the reports decide. The test binary writes its own reports there too.
    # detect_deadlocks=0 in the first pass: a write round at 1,024 shards
    # holds the mutexes of every shard in it at once, in shard order
    # (ReplicationLog::AppendAll, ApplyAll, Replicator::TakeShip), and
    # TSan's lock-order detector stops the process with a CHECK failure
    # past 64 held locks. The second pass, at 4 shards, keeps it on, as
    # do the race tests of the unit binaries.
    export TSAN_OPTIONS="halt_on_error=0 exitcode=0 detect_deadlocks=$deadlocks second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/tsan_suppressions.txt log_path=$reports/tsan"
    echo "== $pass_filter of replication_test against the TSan dedupd, detect_deadlocks=$deadlocks (reports in $reports)"
    "$build_dir/tests/blackbox/replication_test" --gtest_filter="$pass_filter" || tests_status=$?
  }
  replicated_pass "$filter" 0
  [ -n "${1:-}" ] || replicated_pass "$order_filter" 1
  found="$(find "$reports" -type f | wc -l)"
  if [ "$found" -gt 0 ]; then
    echo "TSan reports from $found process(es):"
    for f in "$reports"/*; do echo "--- $f"; cat "$f"; done
    exit 1
  fi
  echo "no TSan report from any node or from the test binary"
  [ "$tests_status" = 0 ] || echo "(replication_test exited $tests_status: see its failures above)"
  rm -rf "$reports"
  exit 0
fi
# The race tests stop at the first report; the full suites list every
# report and fail at exit (TSan's exit code 66) if there was any.
# ignore_noninstrumented_modules: see tests/tsan_suppressions.txt.
halt=1
[ "$mode" = "race" ] || halt=0
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=$halt second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/tsan_suppressions.txt}"
status=0
run() {
  echo "== $* under TSan"
  "$build_dir/$@" || status=1
}
case "$mode" in
  race)
    run tests/storage/storage_test --gtest_filter='*Concurrent*'
    run tests/server/server_test --gtest_filter='ConcurrentClaim*:Stream*'
    run tests/client/client_test --gtest_filter='CoalescedAndUnary/*:SchedulerTest.*:-*Scan*'
    ;;
  full)
    run tests/storage/storage_test
    run tests/server/server_test
    run tests/client/client_test
    ;;
  run)
    for test in tests/storage/storage_test tests/server/server_test tests/client/client_test; do
      run "$test" "$@"
    done
    ;;
esac
exit "$status"
