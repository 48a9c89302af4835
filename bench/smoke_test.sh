#!/usr/bin/env bash
# The bench's smoke test (ctest bench_smoke): dedup_bench starts its own
# dedupd on 127.0.0.1 port 0 with a temp data dir and metrics off, runs a
# couple of seconds of tiny workloads (blocking callers, and the
# asynchronous mode), and the test fails if a run exits
# non-zero, its JSON is malformed or its throughput is 0.
#   bench/smoke_test.sh BUILD/bench/dedup_bench BUILD/server/dedupd
set -euo pipefail
bench="${1:?usage: smoke_test.sh DEDUP_BENCH DEDUPD}"
dedupd="${2:?usage: smoke_test.sh DEDUP_BENCH DEDUPD}"
out="$(mktemp -d "${TMPDIR:-/tmp}/bench_smoke.XXXXXX")"
trap 'rm -rf "$out"' EXIT

run() {  # NAME MODE FLAGS...
  local name="$1" mode="$2"; shift 2
  "$bench" --spawn_dedupd="$dedupd" --spawn_flags=--durability=buffered \
    --warmup=0.2 --duration=1 --max_claims=400 --progress=false \
    --label="smoke-$name" --json_out="$out/$name.json" "$@"
  python3 - "$out/$name.json" "$mode" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    run = json.load(f)
for field in ("claims", "throughput", "latency_us", "server", "workload"):
    assert field in run, f"missing {field}"
assert run["workload"]["mode"] == sys.argv[2], f"mode {run['workload']['mode']}"
assert run["throughput"] > 0, "throughput is 0"
assert run["claims"] > 0 and run["errors"] == 0, f"claims {run['claims']} errors {run['errors']}"
assert run["latency_us"]["p99"] > 0, "no latency"
assert run["server"]["cpu_seconds"] is not None, "server cpu not measured"
print(f"{run['label']}: ok, {run['throughput']:.0f} claims/s")
PY
}

run client blocking --callers=8
run batch blocking --callers=4 --batch=16 --duplicates=0.5 --complete --retention_ms=3600000
run async async --async_in_flight=32 --async_threads=2 --duplicates=0.5 --complete

# --bearer_token_file goes only with Batch requests, and must hold a token.
expect_refused() {  # WHAT FLAGS...
  local what="$1" err; shift
  if err="$("$bench" --system=dedupd --target=127.0.0.1:1 --progress=false "$@" 2>&1)"; then
    echo "dedup_bench ran with $*" >&2
    exit 1
  fi
  grep -q -- "$what" <<<"$err" || { echo "no '$what' in: $err" >&2; exit 1; }
  echo "refused: $*"
}
: >"$out/empty-token"
echo "a-token" >"$out/token"
expect_refused "with --dedupd_api=batch only" --dedupd_api=client --bearer_token_file="$out/token"
expect_refused "cannot read a token" --dedupd_api=batch --batch=4 --bearer_token_file="$out/empty-token"
