#!/usr/bin/env bash
# deploy/local-cluster.sh as an operator uses it: start three nodes, check
# health through the client's routing, stop one (its keys fail, the others
# answer), bring it back, stop all. Usage: check_local_cluster.sh REPO BUILD_DIR
set -euo pipefail
repo="$1" build="$2"
ctl="$build/client/dedupctl"
work="$(mktemp -d)"
trap 'DEDUPD_BINARY="$build/server/dedupd" bash "$repo/deploy/local-cluster.sh" stop -d "$work" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# A base port with BASE..BASE+2 and BASE+100..BASE+102 free on 127.0.0.1.
base="$(python3 - <<'PY'
import random, socket
for _ in range(200):
    base = random.randint(20000, 50000)
    try:
        socks = []
        for p in [base, base + 1, base + 2, base + 100, base + 101, base + 102]:
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        for s in socks: s.close()
        print(base); break
    except OSError:
        for s in socks: s.close()
PY
)"
cluster() { DEDUPD_BINARY="$build/server/dedupd" bash "$repo/deploy/local-cluster.sh" "$@"; }
endpoint="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"

cluster start -n 3 -p "$base" -d "$work"
"$ctl" --endpoint="$endpoint" health
# Keys spread over the nodes by their shard.

for k in $(seq 0 40); do
  "$ctl" --endpoint="$endpoint" claim lc "k$k" --owner=check >/dev/null
done
cluster stop-node 1 -d "$work"
failed=0 answered=0
for k in $(seq 0 40); do
  if "$ctl" --timeout=400ms --endpoint="$endpoint" query lc "k$k" >/dev/null 2>&1; then
    answered=$((answered + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "with node 1 stopped: $answered keys answered, $failed unavailable"
[ "$failed" -gt 0 ] && [ "$answered" -gt 0 ] || { echo "FAIL: expected some keys down and some up"; exit 1; }
cluster start-node 1 -d "$work"
for k in $(seq 0 40); do
  "$ctl" --timeout=10s --endpoint="$endpoint" query lc "k$k" >/dev/null ||
    { echo "FAIL: k$k unavailable after node 1 returned"; exit 1; }
done
cluster status -d "$work"
cluster stop -d "$work"
echo "local cluster: 1 passed, 0 failed"
