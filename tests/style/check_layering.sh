#!/usr/bin/env bash
# Fails when a translation unit of server/, client/ or bench/ includes a
# RocksDB header, directly or through any other header: only storage/ may
# see RocksDB. Reads the header dependencies the compiler recorded in the
# Ninja build, so it checks what was really compiled.
#   check_layering.sh BUILD_DIR
set -euo pipefail
build="${1:?usage: check_layering.sh BUILD_DIR}"
[ -f "$build/build.ninja" ] || { echo "check_layering: $build is not a Ninja build directory" >&2; exit 1; }

ninja -C "$build" -t deps | awk '
  # An object line: "server/CMakeFiles/<target>.dir/<file>.o: #deps ..."
  /^[^ ].*\.o: #deps/ {
    object = $1; sub(/:$/, "", object)
    checked = object ~ /^(server|client|bench)\/CMakeFiles\//
    if (checked) objects++
    next
  }
  checked && $1 ~ /\/rocksdb\// {
    print "check_layering: " object " includes " $1 > "/dev/stderr"
    bad++
  }
  END {
    if (objects < 20) {
      print "check_layering: only " objects+0 " server/client/bench objects have recorded dependencies; build first" > "/dev/stderr"
      exit 1
    }
    if (bad > 0) {
      print "check_layering: " bad " RocksDB includes outside storage/ (server, client and bench must use storage/store.h only)" > "/dev/stderr"
      exit 1
    }
    print "check_layering: " objects " server/client/bench objects, none includes a RocksDB header"
  }'
