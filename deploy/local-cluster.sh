#!/usr/bin/env bash
# A dedupd cluster on this machine, for trying routing and failure by hand:
# N nodes on 127.0.0.1, ports BASE..BASE+N-1 (metrics on BASE+100..), one
# data directory each under DIR, all with the same config. With -r R (R
# above 1) every shard has R replicas and leadership lives in an etcd this
# script starts too, on 127.0.0.1 ports BASE+200 (clients) and BASE+201.
#
#   deploy/local-cluster.sh start [-n 3] [-p 7410] [-d ./cluster-data] [-c config.textproto] [-r 3]
#   deploy/local-cluster.sh stop-node I     # SIGTERM one node (static: its keys become
#                                           # unavailable; replicated: it hands its shards over)
#   deploy/local-cluster.sh kill-node I     # SIGKILL one node
#   deploy/local-cluster.sh start-node I    # bring it back on its data directory
#   deploy/local-cluster.sh status | stop
#
# Clients take the node list as their endpoint, e.g.
#   build/client/dedupctl --endpoint=127.0.0.1:7410,127.0.0.1:7411,127.0.0.1:7412 health
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=3 base=7410 dir=./cluster-data config="" replication=1
dedupd="${DEDUPD_BINARY:-${DEDUP_BUILD_DIR:-build}/server/dedupd}"
command="${1:-}"
[ $# -gt 0 ] && shift
node_arg=""
if [ "$command" = "stop-node" ] || [ "$command" = "start-node" ] || [ "$command" = "kill-node" ]; then
  node_arg="${1:?usage: $0 $command NODE_INDEX}"
  shift
fi
while getopts "n:p:d:c:r:" opt; do
  case "$opt" in
    n) nodes="$OPTARG" ;; p) base="$OPTARG" ;; d) dir="$OPTARG" ;; c) config="$OPTARG" ;;
    r) replication="$OPTARG" ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
state="$dir/cluster.env"
if [ -f "$state" ] && [ "$command" != "start" ]; then
  # shellcheck disable=SC1090
  source "$state"
fi

node_list() {
  local list="" i
  for ((i = 0; i < nodes; i++)); do list+="${list:+,}127.0.0.1:$((base + i))"; done
  echo "$list"
}

start_node() {
  local i="$1" pidfile="$dir/node-$1.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "node $i already runs (pid $(cat "$pidfile"))"
    return
  fi
  local args=(--listen="127.0.0.1:$((base + i))" --metrics_listen="127.0.0.1:$((base + 100 + i))"
              --data_dir="$dir/node-$i" --cluster_nodes="$(node_list)" --node_index="$i")
  [ -n "$config" ] && args+=(--config="$config")
  if [ "$replication" -gt 1 ]; then
    args+=(--replication_factor="$replication" --etcd_endpoints="127.0.0.1:$((base + 200))")
  fi
  "$dedupd" "${args[@]}" >>"$dir/node-$i.log" 2>&1 &
  echo $! >"$pidfile"
  await_listening "node $i" "$pidfile" $((base + i)) "$dir/node-$i.log" || return 1
  echo "node $i of $nodes: pid $(cat "$pidfile"), 127.0.0.1:$((base + i)), data $dir/node-$i"
}

# await_listening WHAT PIDFILE PORT LOG: waits up to 10 s for the process to
# accept connections on 127.0.0.1:PORT; one that exits first, or never
# listens, fails with the end of its log.
await_listening() {
  local what="$1" pidfile="$2" port="$3" log="$4"
  for _ in $(seq 1 100); do
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "$what exited; its log ($log):" >&2
      tail -5 "$log" >&2
      return 1
    fi
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$what did not start listening in 10 s; its log: $log" >&2
  return 1
}

stop_node() {
  local pidfile="$dir/node-$1.pid"
  [ -f "$pidfile" ] || return 0
  local pid
  pid="$(cat "$pidfile")"
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "node $1 stopped"
  fi
  rm -f "$pidfile"
}

start_etcd() {
  local pidfile="$dir/etcd.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return; fi
  command -v etcd >/dev/null || { echo "no etcd: run deploy/install-deps.sh first" >&2; exit 1; }
  local client="http://127.0.0.1:$((base + 200))" peer="http://127.0.0.1:$((base + 201))"
  etcd --name local --data-dir "$dir/etcd" --listen-client-urls "$client" \
    --advertise-client-urls "$client" --listen-peer-urls "$peer" \
    --initial-advertise-peer-urls "$peer" --initial-cluster "local=$peer" \
    >>"$dir/etcd.log" 2>&1 &
  echo $! >"$pidfile"
  await_listening etcd "$pidfile" $((base + 200)) "$dir/etcd.log" || exit 1
  echo "etcd: pid $(cat "$pidfile"), 127.0.0.1:$((base + 200)), data $dir/etcd"
}

stop_etcd() {
  local pidfile="$dir/etcd.pid"
  [ -f "$pidfile" ] || return 0
  kill -TERM "$(cat "$pidfile")" 2>/dev/null && echo "etcd stopped"
  rm -f "$pidfile"
}

case "$command" in
  start)
    [ -x "$dedupd" ] || { echo "no dedupd at $dedupd: run deploy/build.sh first" >&2; exit 1; }
    mkdir -p "$dir"
    config="${config:+$(realpath "$config")}"
    printf 'nodes=%q base=%q config=%q replication=%q\n' "$nodes" "$base" "$config" \
      "$replication" >"$state"
    [ "$replication" -gt 1 ] && start_etcd
    for ((i = 0; i < nodes; i++)); do start_node "$i"; done
    echo "endpoint: $(node_list)"
    ;;
  stop-node) stop_node "$node_arg" ;;
  kill-node)
    pidfile="$dir/node-$node_arg.pid"
    [ -f "$pidfile" ] && kill -KILL "$(cat "$pidfile")" 2>/dev/null && echo "node $node_arg killed"
    rm -f "$pidfile"
    ;;
  start-node) start_node "$node_arg" ;;
  status)
    for ((i = 0; i < nodes; i++)); do
      pidfile="$dir/node-$i.pid"
      if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "node $i: running, pid $(cat "$pidfile"), 127.0.0.1:$((base + i))"
      else
        echo "node $i: stopped"
      fi
    done
    ;;
  stop)
    for ((i = 0; i < nodes; i++)); do stop_node "$i"; done
    stop_etcd
    ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
