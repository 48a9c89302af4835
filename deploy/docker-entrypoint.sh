#!/usr/bin/env bash
# Entrypoint of the dedupd image: starts /usr/local/bin/dedupd with the
# image's defaults, then the container's arguments (later flags win):
#
#   --config=/etc/dedupd/dedupd.textproto  --listen=0.0.0.0:7400
#   --metrics_listen=0.0.0.0:7401  --probe_listen=0.0.0.0:7402
#   --data_dir=/var/lib/dedupd
#   [--cluster_nodes=$DEDUPD_CLUSTER_NODES] [--node_index=N] [--zone=ZONE]
#   "$@"
#
# In a cluster (DEDUPD_CLUSTER_NODES set, or --cluster_nodes among the
# arguments) every node needs its index in that list. It is, in order:
# --node_index among the arguments; DEDUPD_NODE_INDEX; otherwise the
# number ending the pod name (POD_NAME, else HOSTNAME, else `hostname`),
# as a StatefulSet names its pods: dedupd-2 is node 2. Without cluster
# nodes dedupd runs as a single node that owns every shard.
#
# The node's zone (cluster.zone: its failure domain, such as an
# availability zone) is, in order: --zone among the arguments;
# DEDUPD_ZONE; otherwise the content of the file DEDUPD_ZONE_FILE names,
# without surrounding white space (the Helm chart's init container writes
# the Kubernetes node's zone there). A DEDUPD_ZONE_FILE that is missing or
# empty gives no zone, which the entrypoint says on stderr, and dedupd runs
# without one, as it does when none of the three is set.
#
# Environment: DEDUPD_CONFIG, DEDUPD_LISTEN, DEDUPD_METRICS_LISTEN,
# DEDUPD_PROBE_LISTEN and DEDUPD_DATA_DIR replace the defaults above
# (DEDUPD_CONFIG= starts without a config file); DEDUPD_ZONE and
# DEDUPD_ZONE_FILE give the zone as above; DEDUPD_BIN replaces the binary.
# A first argument that is not a flag runs that command instead
# (`docker run -it IMAGE bash`).
set -euo pipefail

say() { echo "docker-entrypoint: $*" >&2; }
fail() {
  say "$@"
  exit 2
}

if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
  exec "$@"
fi

# What the arguments already say about the cluster.
arg_nodes=""
arg_index=""
arg_zone=""
previous=""
for arg in "$@"; do
  case "$previous" in
    --cluster_nodes | -cluster_nodes) arg_nodes="$arg" ;;
    --node_index | -node_index) arg_index="$arg" ;;
  esac
  case "$arg" in
    --cluster_nodes=* | -cluster_nodes=*) arg_nodes="${arg#*=}" ;;
    --node_index=* | -node_index=*) arg_index="${arg#*=}" ;;
    --zone | -zone | --zone=* | -zone=*) arg_zone=1 ;;
  esac
  previous="$arg"
done

flags=()
if [ -n "${DEDUPD_CONFIG-/etc/dedupd/dedupd.textproto}" ]; then
  flags+=("--config=${DEDUPD_CONFIG-/etc/dedupd/dedupd.textproto}")
fi
flags+=(
  "--listen=${DEDUPD_LISTEN:-0.0.0.0:7400}"
  "--metrics_listen=${DEDUPD_METRICS_LISTEN:-0.0.0.0:7401}"
  "--probe_listen=${DEDUPD_PROBE_LISTEN:-0.0.0.0:7402}"
  "--data_dir=${DEDUPD_DATA_DIR:-/var/lib/dedupd}"
)

nodes="${arg_nodes:-${DEDUPD_CLUSTER_NODES:-}}"
if [ -n "${DEDUPD_CLUSTER_NODES:-}" ]; then
  flags+=("--cluster_nodes=${DEDUPD_CLUSTER_NODES}")
fi

if [ -n "$nodes" ] && [ -z "$arg_index" ]; then
  index="${DEDUPD_NODE_INDEX:-}"
  source="DEDUPD_NODE_INDEX"
  if [ -z "$index" ]; then
    pod="${POD_NAME:-${HOSTNAME:-$(hostname)}}"
    index="${pod##*-}"
    source="pod name '$pod'"
    if [ "$index" = "$pod" ]; then index=""; fi
  fi
  case "$index" in
    '' | *[!0-9]*)
      fail "cannot tell this node's index from $source: expected a name ending" \
        "in -N (a StatefulSet pod such as dedupd-2); set DEDUPD_NODE_INDEX or" \
        "pass --node_index" ;;
  esac
  index=$((10#$index))
  IFS=',' read -r -a addresses <<<"$nodes"
  if [ "$index" -ge "${#addresses[@]}" ]; then
    fail "this is node $index (from $source) but the cluster lists only" \
      "${#addresses[@]} nodes: $nodes. A StatefulSet scaled past its" \
      "cluster_nodes needs a new cluster (see deploy/helm/dedupd/README.md)"
  fi
  flags+=("--node_index=$index")
fi

if [ -z "$arg_zone" ]; then
  zone="${DEDUPD_ZONE:-}"
  if [ -z "$zone" ] && [ -n "${DEDUPD_ZONE_FILE:-}" ]; then
    if [ -f "$DEDUPD_ZONE_FILE" ] && [ -r "$DEDUPD_ZONE_FILE" ]; then
      zone="$(<"$DEDUPD_ZONE_FILE")"
      zone="${zone#"${zone%%[![:space:]]*}"}"
      zone="${zone%"${zone##*[![:space:]]}"}"
      if [ -z "$zone" ]; then
        say "DEDUPD_ZONE_FILE $DEDUPD_ZONE_FILE is empty: running without a zone"
      fi
    else
      say "DEDUPD_ZONE_FILE $DEDUPD_ZONE_FILE cannot be read: running without a zone"
    fi
  fi
  if [ -n "$zone" ]; then
    flags+=("--zone=$zone")
  fi
fi

exec "${DEDUPD_BIN:-/usr/local/bin/dedupd}" "${flags[@]}" "$@"
