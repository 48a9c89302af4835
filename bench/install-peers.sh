#!/usr/bin/env bash
# Installs what bench/compare needs beyond dedupd's own build dependencies,
# from Debian 12's archive: the peer servers (Redis, PostgreSQL), their C
# client libraries (hiredis, libpq) and a chart plotter (gnuplot, or
# matplotlib when gnuplot is not in the archive). Safe to run again.
#   bench/install-peers.sh           everything
#   bench/install-peers.sh --check   list what is missing and exit 1 if any
set -euo pipefail
cd "$(dirname "$0")/.."

# dedupd's own build and test dependencies come first.
if [ "${1:-}" != "--check" ]; then
  bash deploy/install-deps.sh
fi

packages=(redis-server postgresql libhiredis-dev libpq-dev)
# The chart: gnuplot without X is the smallest; matplotlib is the fallback.
if apt-cache show gnuplot-nox >/dev/null 2>&1; then
  packages+=(gnuplot-nox)
elif apt-cache show python3-matplotlib >/dev/null 2>&1; then
  packages+=(python3-matplotlib)
else
  echo "install-peers: neither gnuplot-nox nor python3-matplotlib is available; no chart" >&2
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-peers: all ${#packages[@]} packages present"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "install-peers: missing ${missing[*]}"
  exit 1
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-peers: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The Debian packages start their services on install; the bench runs its own
# instances on free ports, so keep the system-wide ones from starting.
policy_rc=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy_rc" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy_rc" >/dev/null
  $sudo chmod +x "$policy_rc"
  made_policy=1
fi
trap '[ "$made_policy" = 1 ] && $sudo rm -f "$policy_rc"' EXIT
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
