#!/usr/bin/env bash
# The client library as another project uses it: install dedupd's build into
# a temporary prefix, build tests/package/consumer with find_package(dedup),
# and run it against a dedupd on 127.0.0.1.
# Usage: check_find_package.sh REPO BUILD_DIR
set -euo pipefail
repo="$1" build="$2"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" || true
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
cmake -S "$repo/tests/package/consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" >"$work/build.log" || { cat "$work/build.log"; exit 1; }

"$work/prefix/bin/dedupd" --listen=127.0.0.1:0 --metrics_listen=off --port_file="$work/port" \
  --data_dir="$work/data" --durability=buffered --log_level=warn &
server_pid=$!
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { echo "FAIL: installed dedupd did not start"; exit 1; }
outcome="$("$work/consumer/consumer" "127.0.0.1:$(cat "$work/port")")"
echo "consumer built with find_package(dedup) answered: $outcome"
[ "$outcome" = "EXECUTED" ]
echo "find_package(dedup): 1 passed, 0 failed"
