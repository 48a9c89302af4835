#!/usr/bin/env bash
# bench/ab's smoke test (ctest bench_ab_smoke): a tiny A/B of one caller with
# one second of preload, side A given MALLOC_CONF by --env_a while the calling
# shell has its own value. Each side's dedupd is a wrapper that records the
# MALLOC_CONF it was started with. The test fails unless every run finished
# with its preload and page faults recorded, side A's servers got the
# override, and side B's the caller's own value.
#   bench/ab_smoke_test.sh BUILD_DIR
set -euo pipefail
build_dir="$(cd "${1:?usage: ab_smoke_test.sh BUILD_DIR}" && pwd)"
cd "$(dirname "$0")/.."
work="$(mktemp -d "${TMPDIR:-/tmp}/bench_ab_smoke.XXXXXX")"
trap 'rm -rf "$work"' EXIT

cat >"$work/dedupd" <<EOF
#!/bin/sh
echo "\${MALLOC_CONF:-unset}" >>"$work/env.log"
exec "$build_dir/server/dedupd" "\$@"
EOF
chmod +x "$work/dedupd"

MALLOC_CONF=dirty_decay_ms:5000 bench/ab --build_dir="$build_dir" \
  --dedupd_a="$work/dedupd" --dedupd_b="$work/dedupd" \
  --env_a=MALLOC_CONF=muzzy_decay_ms:0 --preload=1 --rows=c1 --repeats=3 \
  --warmup=0 --duration=1 --out="$work/runs.jsonl" >"$work/table.txt"

python3 - "$work/runs.jsonl" "$work/env.log" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
started = open(sys.argv[2]).read().split()
assert len(runs) == 6, f"{len(runs)} runs of 6"
for run in runs:
    ab = run["ab"]
    assert run["throughput"] > 0, f"no throughput: {ab}"
    assert ab["preload_s"] == 1, ab
    # The preload wrote new keys, so the server touched new memory.
    assert ab["server_minor_faults"] > 0, ab
# Sides alternate A, B in each repeat.
assert started == ["muzzy_decay_ms:0", "dirty_decay_ms:5000"] * 3, started
print("bench/ab: ok, 6 runs, each side's environment as given")
PY
cat "$work/table.txt"
