# The cluster Jobs of a replicated release (templates/cluster-jobs.yaml),
# run by /bin/sh in the dedupd image:
#
#   cluster-job.sh drain      before an upgrade or rollback: empties the pods
#                             that a smaller replicaCount deletes
#   cluster-job.sh rebalance  after an install, upgrade or rollback: every
#                             pod has joined, and replicas are spread evenly
#
# The Job's environment:
#   DEDUPCTL                  dedupctl's path
#   DEDUPCTL_TARGET           the client Service, HOST:PORT
#   DEDUPCTL_TLS              dedupctl's TLS options; empty: plaintext
#   NODE_COUNT                replicaCount of the release being applied
#   NODE_PREFIX, NODE_SUFFIX  pod i's node address is $NODE_PREFIX$i$NODE_SUFFIX
#   WAIT                      --wait of each command that moves replicas
#
# Both are safe to run again: a remove-node of a node that holds nothing
# and an add-node or rebalance of a balanced cluster return at once.
# rebalance expects the rollout to be over (`helm upgrade --wait`): it
# waits for every pod to serve, but a pod the StatefulSet restarts
# afterwards is not live for a moment, and a move may start off it.
set -eu

# $DEDUPCTL_TLS is split into its options on purpose.
# shellcheck disable=SC2086
ctl_at() {
  endpoint="$1"
  shift
  "$DEDUPCTL" --endpoint="$endpoint" $DEDUPCTL_TLS "$@"
}
ctl() { ctl_at "$DEDUPCTL_TARGET" "$@"; }

say() { echo "cluster-job: $*"; }

pod_address() { echo "$NODE_PREFIX$1$NODE_SUFFIX"; }

# Sets $status to `cluster status --json` once the cluster answers: exit 0,
# or 16 while a shard has no leader or live majority (the rest of the
# answer is right all the same). Until then it retries every 5 seconds;
# the Job's activeDeadlineSeconds bounds the wait.
read_status() {
  while :; do
    code=0
    status="$(ctl --timeout=10s cluster status --json)" || code=$?
    if [ "$code" -eq 0 ] || [ "$code" -eq 16 ]; then
      return 0
    fi
    say "the cluster does not answer at $DEDUPCTL_TARGET yet (dedupctl exit $code); retrying in 5s" >&2
    sleep 5
  done
}

# Prints the addresses in $status's "nodes", one a line: one line of JSON
# (client/dedupctl/cluster_status.cc) whose "nodes" array holds only quoted
# addresses, "" for a node that is gone.
status_nodes() {
  printf '%s\n' "$status" | sed -n 's/.*"nodes":\[\([^]]*\)\].*/\1/p' | tr ',' '\n' | tr -d '"'
}

# Prints the StatefulSet ordinal of node address $1; fails for an address
# that is not one of this StatefulSet's pods.
ordinal_of() {
  case "$1" in
    "$NODE_PREFIX"*"$NODE_SUFFIX") ;;
    *) return 1 ;;
  esac
  ordinal="${1#"$NODE_PREFIX"}"
  ordinal="${ordinal%"$NODE_SUFFIX"}"
  case "$ordinal" in
    '' | *[!0-9]*) return 1 ;;
  esac
  echo "$ordinal"
}

# Succeeds when node $1 is gone and holds nothing, as far as $status tells:
# it did not answer (it is listed under "unreachable" as "ADDR: reason"),
# no shard names it as leader or replica (its address appears once, in
# "nodes"), and every shard's replicas are known. The cluster keeps the
# nodes of earlier shrinks in its list; a remove-node of one would be
# refused while a pod is down, and so block an unrelated upgrade.
gone_and_empty() {
  case "$status" in *"\"$1: "*) ;; *) return 1 ;; esac
  case "$status" in *'"replicas":null'*) return 1 ;; esac
  [ "$(printf '%s' "$status" | grep -oF -- "\"$1\"" | wc -l)" -eq 1 ]
}

# Runs `cluster remove-node` for every node of the cluster whose pod ordinal
# is NODE_COUNT or above, highest first, as the StatefulSet deletes them.
# The pre-upgrade hook is rendered with the new values only, so the cluster
# is asked which nodes exist.
drain() {
  read_status
  nodes="$(status_nodes)"
  ours=0
  leaving=""
  for address in $nodes; do
    ordinal="$(ordinal_of "$address")" || continue
    ours=$((ours + 1))
    if [ "$ordinal" -ge "$NODE_COUNT" ]; then
      leaving="$leaving $ordinal"
    fi
  done
  if [ "$ours" -eq 0 ]; then
    # Nothing recognised must not pass for nothing to drain: the
    # StatefulSet would then delete pods that still hold replicas.
    say "FAIL: none of the cluster's nodes is a pod ${NODE_PREFIX}N$NODE_SUFFIX of this" \
      "release; nodes: $(printf '%s\n' "$nodes" | tr '\n' ' ')" >&2
    exit 1
  fi
  if [ -z "$leaving" ]; then
    say "no node at ordinal $NODE_COUNT or above among the cluster's $ours; nothing to drain"
    return 0
  fi
  # $leaving is split into its ordinals on purpose.
  # shellcheck disable=SC2086
  for ordinal in $(printf '%s\n' $leaving | sort -rnu); do
    address="$(pod_address "$ordinal")"
    if gone_and_empty "$address"; then
      say "$address does not answer and holds no replica: gone already, nothing to drain"
      continue
    fi
    say "draining pod $NODE_PREFIX$ordinal: cluster remove-node $address"
    ctl cluster remove-node "$address" --wait="$WAIT"
  done
  say "the nodes at ordinal $NODE_COUNT and above hold nothing; the StatefulSet may delete them"
}

# Waits until every pod 0 .. NODE_COUNT-1 answers a health check, so that no
# move starts while new pods are still starting: a node that is not live
# counts as one to move replicas off. Then `cluster add-node` for each, the
# highest first (the first that rebalances sees every pod), which also
# clears a draining mark left by an earlier shrink, and a last `cluster
# rebalance` that checks the balance.
rebalance() {
  read_status
  ordinal=$((NODE_COUNT - 1))
  while [ "$ordinal" -ge 0 ]; do
    until ctl_at "$(pod_address "$ordinal")" --timeout=10s health >/dev/null; do
      say "waiting for pod $NODE_PREFIX$ordinal to serve; retrying in 5s"
      sleep 5
    done
    ordinal=$((ordinal - 1))
  done
  ordinal=$((NODE_COUNT - 1))
  while [ "$ordinal" -ge 0 ]; do
    say "cluster add-node $(pod_address "$ordinal")"
    ctl cluster add-node "$(pod_address "$ordinal")" --wait="$WAIT"
    ordinal=$((ordinal - 1))
  done
  say "cluster rebalance"
  ctl cluster rebalance --wait="$WAIT"
  say "every pod has joined and the replicas are balanced"
}

case "${1:-}" in
  drain) drain ;;
  rebalance) rebalance ;;
  *)
    echo "usage: cluster-job.sh drain|rebalance" >&2
    exit 2
    ;;
esac
