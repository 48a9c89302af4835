#!/usr/bin/env bash
# bench/replicated's smoke test (ctest bench_replicated_smoke), so that the
# replication benchmark never rots: one short paced run against a single
# node and against a three-node rf=3 cluster of this build (ports of
# bench/replicated on 127.0.0.1, its own etcd), buffered only. Both rows
# run without errors at no more than the paced rate (and not far below it);
# the cluster's leaders must have shipped calls carrying entries, and more
# bytes than the logged writes within them, the single node nothing; and
# the printed summary must name the pace, the calls per claim and the
# bytes. Three nodes with replication_factor=1, and the gRPC floor in the
# rf=3 shape (dedup_transport_floor as three nodes, each shipping to the
# other two, by unary calls, streams or callbacks, or not shipping), serve
# the same pace without errors, each of their processes busy. A bad flag exits 2, and so does an --api that is neither client
# nor unary, or --api=unary with a floor. (That every entry is shipped to
# both followers is
# ReplicationTest.FollowersApplyEveryCommittedEntryOnceTheWritesStop's.)
#   bench/replicated_smoke_test.sh BUILD_DIR
set -euo pipefail
build_dir="${1:?usage: replicated_smoke_test.sh BUILD_DIR}"
cd "$(dirname "$0")/.."
out="$(mktemp -d "${TMPDIR:-/tmp}/replicated_smoke.XXXXXX")"
trap 'rm -rf "$out"' EXIT

code=0
bench/replicated --callers=x --bogus >/dev/null 2>&1 || code=$?
[ "$code" -eq 2 ] || { echo "FAIL: an unknown flag exited $code, not 2" >&2; exit 1; }
code=0
bench/replicated --api=batch >/dev/null 2>&1 || code=$?
[ "$code" -eq 2 ] || { echo "FAIL: --api=batch (no leader routing) exited $code, not 2" >&2; exit 1; }
code=0
bench/replicated --api=unary --systems=floor3 >/dev/null 2>&1 || code=$?
[ "$code" -eq 2 ] || { echo "FAIL: --api=unary with a gRPC floor exited $code, not 2" >&2; exit 1; }

bench/replicated --build_dir="$build_dir" --durability=buffered --repeats=1 --duration=2 \
  --warmup=1 --callers=8 --rate=100 --systems=single,sharded3,rf3,floor3,floor3-unshipped,floor3-stream,floor3-callback --out="$out/rows.jsonl" >"$out/summary.txt" 2>"$out/progress.txt" || {
  echo "FAIL: bench/replicated exited non-zero" >&2
  cat "$out/progress.txt" "$out/summary.txt" >&2
  exit 1
}
cat "$out/summary.txt"
python3 - "$out/rows.jsonl" "$out/summary.txt" <<'PY'
import json, sys
rows = {json.loads(line)["system"]: json.loads(line) for line in open(sys.argv[1])}
summary = open(sys.argv[2]).read()
problems = []
single, cluster = rows.get("single node buffered"), rows.get("rf=3 (3 nodes) buffered")
floor, sharded = rows.get("gRPC floor, 3 nodes"), rows.get("3 nodes, rf=1 buffered")
if single is None or cluster is None or floor is None or sharded is None:
    sys.exit(f"FAIL: expected single-node, rf=3, rf=1 and floor rows, got {sorted(rows)}")
for name, row in (("single node", single), ("rf=3", cluster), ("rf=3 floor", floor),
                  ("rf=1", sharded)):
    if row["errors"] != 0:
        problems.append(f"{name}: {row['errors']} errors")
    # Paced to 100 claims/s: above it the pace was ignored; far below it,
    # something stalled.
    if not 50 <= row["claims_per_s"] <= 110:
        problems.append(f"{name}: {row['claims_per_s']:.0f} claims/s, paced to 100")
    if row["server_cpu_us_per_claim"] <= 0:
        problems.append(f"{name}: no server CPU measured")
if single["ship_calls"] != 0 or single["shipped_entries"] != 0:
    problems.append(f"the single node shipped: {single['ship_calls']} calls")
if cluster["ship_calls"] <= 0 or cluster["shipped_entries"] <= 0:
    problems.append(f"rf=3: {cluster['ship_calls']} calls carrying {cluster['shipped_entries']} "
                    f"entries for {cluster['claims']} claims")
if cluster["shipped_bytes"] < cluster["shipped_entry_bytes"] or cluster["shipped_entry_bytes"] <= 0:
    problems.append(f"rf=3: {cluster['shipped_bytes']} bytes shipped around "
                    f"{cluster['shipped_entry_bytes']} bytes of logged writes")
if ("paced to 100 claims/s" not in summary or "replication calls per claim" not in summary
        or "bytes shipped to each follower" not in summary):
    problems.append("the summary lacks the pace, the calls per claim or the bytes shipped")
# The floor's leader answers only once a follower answered its Ship: its
# three processes all worked.
# So did the three nodes of rf=1, the client library sending each key to
# its shard's node.
for name in ("gRPC floor, 3 nodes, unshipped", "gRPC floor, 3 nodes, streams",
             "gRPC floor, 3 nodes, callbacks"):
    row = rows.get(name)
    if row is None:
        problems.append(f"no row '{name}'")
    elif row["errors"] != 0 or not 50 <= row["claims_per_s"] <= 110:
        problems.append(f"{name}: {row['errors']} errors, {row['claims_per_s']:.0f} claims/s")
    elif min(row["node_cpu_us_per_claim"]) <= 0:
        problems.append(f"{name}: CPU by process {row['node_cpu_us_per_claim']}")
for name, row in (("rf=3 floor", floor), ("rf=1", sharded)):
    if len(row["node_cpu_us_per_claim"]) != 3 or min(row["node_cpu_us_per_claim"]) <= 0:
        problems.append(f"{name}: CPU by process {row['node_cpu_us_per_claim']}")
if problems:
    sys.exit("FAIL: " + "; ".join(problems))
print("bench/replicated smoke: ok")
PY
