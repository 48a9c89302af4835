#!/usr/bin/env bash
# The container image built and run for real, with podman.
#
#   bash tests/deploy/check_image.sh SOURCE_DIR BUILD_DIR
#
# 1. deploy/build-image.sh --prebuilt BUILD_DIR builds the image from the
#    Dockerfile with the binaries of BUILD_DIR (making the debian:12 base
#    with debootstrap when there is none), under a tag of this run.
# 2. The image runs as uid 10001, and `dedupd --version` through its
#    entrypoint prints what BUILD_DIR's dedupd prints.
# 3. etcd (from the host) and three dedupd containers of the image form a
#    replicated cluster (replication_factor 3) on 127.0.0.1 ports, with host
#    networking, started through the entrypoint as the chart starts its
#    pods: the pod name in POD_NAME, --cluster_nodes in the arguments, the
#    chart's security context (uid 10001, read-only root file system, a
#    tmpfs on /tmp, no capabilities, no privilege escalation). In a running
#    node dedupd is process 1, runs as 10001, cannot write its root file
#    system and can write its data volume.
# 4. The chart's `helm test` pod script (templates/tests/round-trip.yaml,
#    rendered by helm) runs in a container of the image, as the test pod
#    would: health, then claim -> complete -> claim answering COMPLETED.
# 5. SIGTERM to the container of a node that leads shards (podman stop, as
#    Kubernetes stops a pod): it exits 0, its log names a hand-over for each
#    shard it led, the other two nodes lead every
#    shard before the leader lease (10 s) could have run out, and claims
#    of keys of every shard succeed with that node gone. The container
#    starts again on its volume, and the round trip passes.
#
# Skipped (exit 77) when podman is not installed. Needs etcd (Debian's
# etcd-server), debootstrap when the base image is missing, and helm
# (tests/deploy/fetch-helm.sh). deploy/install-deps.sh installs them.
# Everything it starts listens on 127.0.0.1 only and is stopped by its
# container id or process id; the image it tags and its containers are
# removed at the end. It keeps the debian:12 base and podman's cache of the
# runtime stage's layers for the next run (`podman rmi debian:12` and
# `podman image prune` remove them).
set -euo pipefail

src="${1:?usage: check_image.sh SOURCE_DIR BUILD_DIR}"
build="${2:?usage: check_image.sh SOURCE_DIR BUILD_DIR}"
src="$(cd "$src" && pwd)"
build="$(cd "$build" && pwd)"

say() { echo "check_image: $*"; }
fail() {
  echo "check_image: FAIL: $*" >&2
  exit 1
}

if ! command -v podman >/dev/null; then
  say "SKIP: podman is not installed (deploy/install-deps.sh installs it)"
  exit 77
fi
command -v etcd >/dev/null || fail "etcd is not installed (Debian: etcd-server; deploy/install-deps.sh)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$src/deploy/podman/containers.conf}"

started=$SECONDS
work="$(mktemp -d)"
image="localhost/dedupd-check-image:$$"
containers=()
etcd_pid=""
cleanup() {
  local status=$?
  if [ "$status" -ne 0 ] && [ "${#containers[@]}" -gt 0 ]; then
    for c in "${containers[@]}"; do
      echo "--- log of container ${c:0:12} (last 15 lines)" >&2
      podman logs --tail 15 "$c" >&2 2>&1 || true
    done
  fi
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  if [ -n "$etcd_pid" ]; then
    kill "$etcd_pid" 2>/dev/null || true
    wait "$etcd_pid" 2>/dev/null || true
  fi
  # --no-prune: the runtime stage's layers stay cached for the next run.
  podman rmi --no-prune -f "$image" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
# A timeout's SIGTERM (ctest) still removes the containers.
trap 'exit 1' TERM INT

# Free TCP ports on 127.0.0.1: 3 nodes x (gRPC, metrics, probes), etcd x 2.
read -r -a ports <<<"$(python3 - <<'EOF'
import socket
socks = []
for _ in range(11):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)"
grpc_port() { echo "${ports[$1]}"; }
metrics_port() { echo "${ports[$((3 + $1))]}"; }
probe_port() { echo "${ports[$((6 + $1))]}"; }
etcd_client="${ports[9]}" etcd_peer="${ports[10]}"
nodes="127.0.0.1:$(grpc_port 0),127.0.0.1:$(grpc_port 1),127.0.0.1:$(grpc_port 2)"

# -- 1. Build.
say "building $image from $build (deploy/build-image.sh --prebuilt)"
bash "$src/deploy/build-image.sh" --prebuilt "$build" --tag "$image" >"$work/build.log" 2>&1 ||
  { tail -n 30 "$work/build.log" >&2; fail "deploy/build-image.sh --prebuilt $build"; }
grep -E '^build-image: (built|making|base)' "$work/build.log" | sed 's/^/  /'

# -- 2. User and version.
user="$(podman image inspect --format '{{.Config.User}}' "$image")"
[ "$user" = "10001:10001" ] || fail "the image runs as '$user', expected 10001:10001 (the chart's runAsUser)"
say "ok - the image's user is 10001:10001"
expected="$("$build/server/dedupd" --version)"
actual="$(podman run --rm --network=host "$image" --version 2>&1)" ||
  fail "dedupd --version through the entrypoint failed: $actual"
[ "$actual" = "$expected" ] || fail "dedupd --version in the image: '$actual'; the build's: '$expected'"
say "ok - dedupd --version in the image: $actual"

# -- 3. etcd and three nodes.
etcd --name image-check --data-dir "$work/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_client" --advertise-client-urls "http://127.0.0.1:$etcd_client" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "image-check=http://127.0.0.1:$etcd_peer" >"$work/etcd.log" 2>&1 &
etcd_pid=$!

# http_status URL: the HTTP status of a GET, or 000 when nothing answers.
http_status() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null || true; }
# await WHAT SECONDS COMMAND...: retries COMMAND every 0.2 s.
await() {
  local what="$1" seconds="$2"
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$what: not within ${seconds}s"
    sleep 0.2
  done
}
etcd_healthy() { [ "$(http_status "http://127.0.0.1:$etcd_client/health")" = 200 ]; }
await "etcd healthy on 127.0.0.1:$etcd_client" 30 etcd_healthy

start_node() {
  local i="$1"
  mkdir -p "$work/node-$i"
  chown 10001:10001 "$work/node-$i"
  # The chart's pod: POD_NAME gives the node index, the security context
  # as values.yaml's, /tmp an emptyDir. Loopback addresses instead of the
  # image's 0.0.0.0 defaults, as the container shares the host's network.
  podman run -d --network=host --name "dedupd-check-$$-$i" \
    --read-only --read-only-tmpfs=false --tmpfs /tmp \
    --cap-drop=ALL --security-opt=no-new-privileges \
    -v "$work/node-$i:/var/lib/dedupd" \
    -e POD_NAME="dedupd-$i" \
    -e DEDUPD_LISTEN="127.0.0.1:$(grpc_port "$i")" \
    -e DEDUPD_METRICS_LISTEN="127.0.0.1:$(metrics_port "$i")" \
    -e DEDUPD_PROBE_LISTEN="127.0.0.1:$(probe_port "$i")" \
    "$image" --cluster_nodes="$nodes" --replication_factor=3 \
    --etcd_endpoints="127.0.0.1:$etcd_client" --durability=buffered
}
for i in 0 1 2; do
  containers+=("$(start_node "$i")")
done
ready() { [ "$(http_status "http://127.0.0.1:$(probe_port "$1")/readyz")" = 200 ]; }
for i in 0 1 2; do
  await "node $i ready (/readyz)" 60 ready "$i"
done
say "ok - etcd and three nodes from the image are ready ($nodes)"

# -- The chart's security context, as the running node sees it.
c0="${containers[0]}"
[ "$(podman exec "$c0" id -u)" = 10001 ] || fail "a process in the node runs as $(podman exec "$c0" id -u)"
pid1="$(podman exec "$c0" cat /proc/1/cmdline | tr '\0' ' ')"
case "$pid1" in
  /usr/local/bin/dedupd\ *) ;;
  *) fail "process 1 of the node is not dedupd (the entrypoint must exec it): $pid1" ;;
esac
uid1="$(podman exec "$c0" awk '/^Uid:/ { print $2 }' /proc/1/status)"
[ "$uid1" = 10001 ] || fail "dedupd runs as uid $uid1"
if podman exec "$c0" touch /usr/local/bin/probe 2>"$work/touch.log"; then
  fail "the root file system of a node is writable"
fi
grep -q "Read-only file system" "$work/touch.log" || fail "touch on / failed, but not read-only: $(cat "$work/touch.log")"
podman exec "$c0" touch /var/lib/dedupd/probe /tmp/probe || fail "the data volume or /tmp is not writable"
say "ok - dedupd is process 1 as uid 10001, / is read-only, the data volume and /tmp are writable"

# -- 4. The chart's helm test script, in a container of the image.
helm="$(bash "$src/tests/deploy/fetch-helm.sh")"
"$helm" template check "$src/deploy/helm/dedupd" --show-only templates/tests/round-trip.yaml \
  >"$work/round-trip.yaml" 2>"$work/helm.log" || { cat "$work/helm.log" >&2; fail "helm template"; }
python3 - "$work/round-trip.yaml" "$work" <<'EOF'
import os, sys, yaml
pod = yaml.safe_load(open(sys.argv[1]))
container = pod["spec"]["containers"][0]
command = container["command"]
assert command[:2] == ["/bin/sh", "-ec"] and len(command) == 3, command
open(os.path.join(sys.argv[2], "round-trip.sh"), "w").write(command[2])
with open(os.path.join(sys.argv[2], "round-trip.env"), "w") as f:
    for e in container["env"]:
        if e["name"] != "DEDUPCTL_TARGET":
            f.write("%s=%s\n" % (e["name"], e["value"]))
EOF
# round_trip TARGET: the test pod's command against one node's address, as
# it would run against the client Service; dedupctl routes from there.
round_trip() {
  podman run --rm --network=host --read-only --cap-drop=ALL --security-opt=no-new-privileges \
    --env-file "$work/round-trip.env" -e DEDUPCTL_TARGET="$1" \
    --entrypoint /bin/sh "$image" -ec "$(cat "$work/round-trip.sh")"
}
round_trip "127.0.0.1:$(grpc_port 1)" >"$work/round-trip.log" 2>&1 ||
  { cat "$work/round-trip.log" >&2; fail "the helm test script against the cluster"; }
grep -q '^PASS' "$work/round-trip.log" || { cat "$work/round-trip.log" >&2; fail "the helm test script did not PASS"; }
say "ok - the chart's helm test script passes in a container of the image: $(grep '^PASS' "$work/round-trip.log")"

# -- 5. SIGTERM hands the shards over.
# shards_led I: how many shards node I leads now (0 when it does not answer).
shards_led() {
  curl -s -m 2 "http://127.0.0.1:$(metrics_port "$1")/metrics" 2>/dev/null |
    awk '/^dedup_replication_leader\{/ { n += $2 } END { print n + 0 }'
}
shard_count() {
  curl -s -m 2 "http://127.0.0.1:$(metrics_port 0)/metrics" |
    awk '/^dedup_replication_leader\{/ { n++ } END { print n + 0 }'
}
shards="$(shard_count)"
[ "$shards" -gt 0 ] || fail "node 0 exports no dedup_replication_leader series"
all_led() { [ $(($(shards_led 0) + $(shards_led 1) + $(shards_led 2))) -eq "$shards" ]; }
await "every one of the $shards shards led" 30 all_led
victim=""
for i in 0 1 2; do
  if [ "$(shards_led "$i")" -gt 0 ]; then victim="$i"; break; fi
done
[ -n "$victim" ] || fail "no node leads a shard"
led="$(shards_led "$victim")"
say "node $victim leads $led of $shards shards; stopping its container (SIGTERM)"
stop_started=$SECONDS
podman stop -t 30 "${containers[$victim]}" >/dev/null
code="$(podman inspect --format '{{.State.ExitCode}}' "${containers[$victim]}")"
[ "$code" = 0 ] || fail "node $victim exited $code on SIGTERM, expected 0"
handed_log="$(podman logs "${containers[$victim]}" 2>&1 | grep -c 'reason="stopping: handed to node' || true)"
[ "$handed_log" -ge "$led" ] || fail "node $victim logged $handed_log hand-overs on SIGTERM for the $led shards it led"
others=()
for i in 0 1 2; do [ "$i" = "$victim" ] || others+=("$i"); done
others_lead_all() { [ $(($(shards_led "${others[0]}") + $(shards_led "${others[1]}"))) -eq "$shards" ]; }
await "the other nodes leading every shard" 30 others_lead_all
handed=$((SECONDS - stop_started))
[ "$handed" -lt 10 ] || fail "the other nodes led every shard only ${handed}s after SIGTERM:" \
  "an election after the leader lease ran out, not a hand-over"
say "ok - node $victim exited 0 on SIGTERM, handing over its $led shards; nodes ${others[*]} led all $shards within ${handed}s"
# Every shard still takes writes: claims of keys spread over the shards,
# by the image's dedupctl through node ${others[0]}.
podman run --rm --network=host --read-only --entrypoint /bin/sh "$image" -ec '
  for k in $(seq 1 40); do
    /usr/local/bin/dedupctl --endpoint="$1" --timeout=10s claim image-check "after-stop-$k" --owner=check >/dev/null
  done' sh "127.0.0.1:$(grpc_port "${others[0]}")" >"$work/claims.log" 2>&1 ||
  { cat "$work/claims.log" >&2; fail "claims with node $victim stopped"; }
say "ok - 40 claims over all shards succeed with node $victim stopped"
# The stopped container starts again on its volume and the cluster is whole.
podman start "${containers[$victim]}" >/dev/null
await "node $victim ready again (/readyz)" 60 ready "$victim"
round_trip "127.0.0.1:$(grpc_port "$victim")" >"$work/round-trip.log" 2>&1 ||
  { cat "$work/round-trip.log" >&2; fail "the helm test script after node $victim came back"; }
say "ok - node $victim's container started again on its volume; the helm test script passes"

size="$(podman image inspect --format '{{.Size}}' "$image")"
say "image size $((size / 1000000)) MB"
say "passed in $((SECONDS - started)) s"
