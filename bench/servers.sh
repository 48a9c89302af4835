# Starts and stops the systems bench/compare drives, each on 127.0.0.1 with
# its data in a temp directory, stopped by pid. Sourced, not run:
#   source bench/servers.sh
#   start_redis everysec; ...; stop_server
# After a start_*: SERVER_PID, SERVER_TARGET (host:port), SERVER_DATA (the
# directory to measure with du) and SERVER_TMP (removed by stop_server).
# BENCH_TMP (default $TMPDIR or /tmp) is where the temp directories go; it
# must be on a real disk for fsync numbers to mean anything.

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
BENCH_TMP="${BENCH_TMP:-${TMPDIR:-/tmp}}"

# A TCP port on 127.0.0.1 that is free now (the kernel picks it).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_port PORT SECONDS: until something accepts on 127.0.0.1:PORT.
wait_port() {
  local port="$1" deadline=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2)' \
        "$port" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "servers.sh: nothing listening on 127.0.0.1:$port after $2 s" >&2
  return 1
}

# start_dedupd DEDUPD_BINARY DURABILITY [EXTRA_FLAGS...]
start_dedupd() {
  local binary="$1" durability="$2"
  shift 2
  SERVER_TMP="$(mktemp -d "$BENCH_TMP/bench-dedupd.XXXXXX")"
  SERVER_DATA="$SERVER_TMP/data"
  SERVER_KIND=dedupd
  "$binary" --listen=127.0.0.1:0 --port_file="$SERVER_TMP/port" --metrics_listen=off \
    --data_dir="$SERVER_DATA" --durability="$durability" --log_level=warn "$@" \
    >"$SERVER_TMP/log" 2>&1 &
  SERVER_PID=$!
  local deadline=$((SECONDS + 30))
  while [ ! -s "$SERVER_TMP/port" ]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
      echo "servers.sh: dedupd did not start:" >&2
      cat "$SERVER_TMP/log" >&2
      return 1
    fi
    sleep 0.05
  done
  SERVER_TARGET="127.0.0.1:$(cat "$SERVER_TMP/port")"
}

# start_redis none|everysec|always
#   none: no persistence at all; everysec/always: AOF with that appendfsync.
start_redis() {
  local mode="$1" port
  port="$(free_port)"
  SERVER_TMP="$(mktemp -d "$BENCH_TMP/bench-redis.XXXXXX")"
  SERVER_DATA="$SERVER_TMP"
  SERVER_KIND=redis
  local aof=(--appendonly no)
  [ "$mode" = none ] || aof=(--appendonly yes --appendfsync "$mode")
  redis-server --port "$port" --bind 127.0.0.1 --dir "$SERVER_TMP" --save '' \
    "${aof[@]}" --protected-mode yes --daemonize no --logfile "$SERVER_TMP/log" &
  SERVER_PID=$!
  SERVER_TARGET="127.0.0.1:$port"
  wait_port "$port" 20
}

# start_postgres: a fresh cluster owned by postgres; synchronous_commit is
# set per session by the load generator (--pg_synchronous_commit).
start_postgres() {
  local port
  port="$(free_port)"
  SERVER_TMP="$(mktemp -d "$BENCH_TMP/bench-postgres.XXXXXX")"
  SERVER_DATA="$SERVER_TMP/data"
  SERVER_KIND=postgres
  local as_pg=()
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres:postgres "$SERVER_TMP"
    as_pg=(runuser -u postgres --)
  fi
  "${as_pg[@]}" "$PG_BIN/initdb" -D "$SERVER_DATA" -U postgres --auth=trust \
    --no-instructions >"$SERVER_TMP/initdb.log" 2>&1 || {
    cat "$SERVER_TMP/initdb.log" >&2
    return 1
  }
  # Enough connections for every caller; sockets in the temp dir only.
  "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$SERVER_DATA" -l "$SERVER_TMP/log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$SERVER_TMP -c max_connections=300 -c shared_buffers=1GB" \
    start >/dev/null || {
    cat "$SERVER_TMP/log" >&2
    return 1
  }
  SERVER_PID="$(head -1 "$SERVER_DATA/postmaster.pid")"
  SERVER_TARGET="127.0.0.1:$port"
}

# Stops the server last started (by its pid) and removes its temp dir.
stop_server() {
  [ -n "${SERVER_PID:-}" ] || return 0
  if [ "$SERVER_KIND" = postgres ]; then
    local as_pg=()
    [ "$(id -u)" -eq 0 ] && as_pg=(runuser -u postgres --)
    "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$SERVER_DATA" -m fast -w -t 60 stop >/dev/null 2>&1 ||
      kill -TERM "$SERVER_PID" 2>/dev/null
  else
    kill -TERM "$SERVER_PID" 2>/dev/null
  fi
  local deadline=$((SECONDS + 30))
  while kill -0 "$SERVER_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true  # not a child for postgres
  rm -rf "$SERVER_TMP"
  SERVER_PID=""
}

# minor_faults PID: the page faults the process has taken that needed no disk
# read (first touches of memory among them), from /proc/PID/stat.
minor_faults() {
  local stat
  stat="$(cat "/proc/$1/stat")"
  stat="${stat##*) }"
  # shellcheck disable=SC2086
  set -- $stat
  echo "$8"
}
