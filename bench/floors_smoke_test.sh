#!/usr/bin/env bash
# The floors' smoke test (ctest bench_floors_smoke), so that bench/floors
# never rots: dedup_store_floor applies a few thousand claims and must
# report them with a throughput and a CPU per claim; dedup_transport_floor,
# on each API, must serve dedup_bench (through the client library, on
# 127.0.0.1, port 0) with every claim acquired and stop cleanly on SIGTERM;
# both must refuse bad flags with exit code 2.
#   bench/floors_smoke_test.sh DEDUP_BENCH DEDUP_TRANSPORT_FLOOR DEDUP_STORE_FLOOR
set -euo pipefail
bench="${1:?usage: floors_smoke_test.sh DEDUP_BENCH TRANSPORT_FLOOR STORE_FLOOR}"
transport="${2:?usage: floors_smoke_test.sh DEDUP_BENCH TRANSPORT_FLOOR STORE_FLOOR}"
store="${3:?usage: floors_smoke_test.sh DEDUP_BENCH TRANSPORT_FLOOR STORE_FLOOR}"
out="$(mktemp -d "${TMPDIR:-/tmp}/floors_smoke.XXXXXX")"
floor_pid=""
cleanup() {
  [ -n "$floor_pid" ] && kill -KILL "$floor_pid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT

expect_exit_2() {  # BINARY FLAGS...
  local code=0
  "$@" >/dev/null 2>&1 || code=$?
  [ "$code" -eq 2 ] || { echo "FAIL: $* exited $code, not 2" >&2; exit 1; }
}
expect_exit_2 "$store" --batch=0
expect_exit_2 "$store" --memtable=btree
expect_exit_2 "$transport" --api=sync
expect_exit_2 "$transport" --threads=0
mkdir "$out/exists"
expect_exit_2 "$store" --dir="$out/exists"

for shape in "1 64 20000" "2 1 3000"; do
  read -r threads batch claims <<<"$shape"
  "$store" --threads="$threads" --batch="$batch" --claims="$claims" --dir="$out/store-$threads" \
    >"$out/store.json"
  python3 - "$out/store.json" "$threads" "$batch" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
assert run["threads"] == int(sys.argv[2]) and run["batch"] == int(sys.argv[3]), run
assert run["claims"] > 0 and run["claims_per_s"] > 0 and run["cpu_us_per_claim"] > 0, run
print(f"store floor, {run['threads']} threads, batch {run['batch']}: ok, "
      f"{run['cpu_us_per_claim']:.1f} us per claim")
PY
  [ ! -e "$out/store-$threads" ] || { echo "FAIL: the store floor left its directory" >&2; exit 1; }
done

for api in callback async; do
  "$transport" --api="$api" --port=0 >"$out/floor.out" 2>&1 &
  floor_pid=$!
  for _ in $(seq 1 100); do
    grep -q ' on 127\.0\.0\.1:' "$out/floor.out" && break
    sleep 0.1
  done
  target="$(sed -n 's/.* on \(127\.0\.0\.1:[0-9]*\)$/\1/p' "$out/floor.out")"
  [ -n "$target" ] || { echo "FAIL: the $api floor did not say where it listens" >&2; exit 1; }
  "$bench" --system=dedupd --target="$target" --server_pid="$floor_pid" --callers=4 \
    --warmup=0.2 --duration=1 --max_claims=400 --duplicates=0 --progress=false \
    --json_out="$out/$api.json" >/dev/null
  python3 - "$out/$api.json" "$api" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
assert run["throughput"] > 0 and run["errors"] == 0, run
assert run["acquired"] == run["claims"], (run["acquired"], run["claims"])
assert run["server"]["cpu_seconds"] is not None, "server cpu not measured"
print(f"transport floor, {sys.argv[2]} API: ok, {run['throughput']:.0f} claims/s")
PY
  kill -TERM "$floor_pid"
  code=0
  wait "$floor_pid" || code=$?
  floor_pid=""
  [ "$code" -eq 0 ] || { echo "FAIL: the $api floor exited $code on SIGTERM" >&2; exit 1; }
done
