#!/usr/bin/env bash
# On a fresh Debian 12 machine: installs what dedupd needs, builds it (with
# dedupctl and the example consumers README runs against it) and starts it
# in the foreground on 127.0.0.1:7400 with its data in ./dedupd-data
# (RocksDB; nothing else to set up). Ctrl-C stops it cleanly.
# Any dedupd flag may follow, e.g. deploy/start.sh --durability=buffered
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
bash deploy/build.sh dedupd dedupctl payment_consumer coupon_consumer
exec "${DEDUP_BUILD_DIR:-build}/server/dedupd" --data_dir=./dedupd-data "$@"
