#!/usr/bin/env bash
# Builds the dedupd container image from the project's Dockerfile, with
# podman (or docker), on a host with or without an image registry.
#
#   deploy/build-image.sh                        compile inside the image build
#   deploy/build-image.sh --prebuilt build       take build/server/dedupd and
#                                                build/client/dedupctl instead
#
# Options:
#   --tag NAME          image name (default dedupd:VERSION, VERSION from CMakeLists.txt)
#   --prebuilt DIR      a CMake build directory of this tree, built on Debian 12:
#                       its dedupd and dedupctl go into the runtime stage (the
#                       Dockerfile's `prebuilt` target); nothing is compiled
#   --engine E          podman or docker (default: podman when installed)
#   --base-only         only make sure the debian:12 base image exists
#   --warm              make the base and build the runtime stage, untagged,
#                       so that a later --prebuilt build takes seconds
#                       (deploy/test.sh runs this while it compiles)
#   --mirror URL        Debian archive for debootstrap (default: the one apt uses)
#   -h, --help          this text
#
# The base. The Dockerfile starts FROM debian:12. When the engine has no such
# image and debootstrap is installed (root only), it is made from Debian's
# archive, as no registry may be reachable: `debootstrap --variant=minbase
# bookworm` with the mirror apt already uses, apt set up as in Debian's
# official image (bookworm, -updates and -security; no package cache kept),
# then imported as docker.io/library/debian:12, the name FROM resolves to.
# It is kept for later builds (one to four minutes to make, 121 MB); remove it
# with `podman rmi debian:12`. Without debootstrap the engine pulls it.
#
# Podman. Unless CONTAINERS_CONF is set, deploy/podman/containers.conf is
# used (runc, cgroupfs, no default ulimits), and RUN steps use the host's
# network. deploy/install-deps.sh installs podman, runc and debootstrap.
set -euo pipefail
caller="$(pwd)"
cd "$(dirname "$0")/.."
repo="$(pwd)"
# from_caller PATH: PATH as the caller meant it, before the cd above.
from_caller() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
say() { echo "build-image: $*"; }
die() {
  echo "build-image: $*" >&2
  exit 1
}

version="$(sed -n 's/^project(dedup VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
tag="dedupd:${version:-latest}"
prebuilt=""
engine=""
base_only=0
warm=0
mirror="${DEBIAN_MIRROR:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="${2:?--tag needs a name}"; shift 2 ;;
    --tag=*) tag="${1#*=}"; shift ;;
    --prebuilt) prebuilt="${2:?--prebuilt needs a build directory}"; shift 2 ;;
    --prebuilt=*) prebuilt="${1#*=}"; shift ;;
    --engine) engine="${2:?--engine needs podman or docker}"; shift 2 ;;
    --engine=*) engine="${1#*=}"; shift ;;
    --base-only) base_only=1; shift ;;
    --warm) warm=1; shift ;;
    --mirror) mirror="${2:?--mirror needs a URL}"; shift 2 ;;
    --mirror=*) mirror="${1#*=}"; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

if [ -z "$engine" ]; then
  if command -v podman >/dev/null; then
    engine=podman
  elif command -v docker >/dev/null; then
    engine=docker
  else
    die "neither podman nor docker is installed (deploy/install-deps.sh installs podman)"
  fi
fi
case "$engine" in
  podman | docker) command -v "$engine" >/dev/null || die "$engine is not installed" ;;
  *) die "--engine must be podman or docker, not $engine" ;;
esac
build_flags=()
if [ "$engine" = podman ]; then
  if [ -n "${CONTAINERS_CONF:-}" ]; then
    CONTAINERS_CONF="$(from_caller "$CONTAINERS_CONF")"
  fi
  export CONTAINERS_CONF="${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}"
  build_flags+=(--network=host)
fi

base="docker.io/library/debian:12"

# The first URI of the Debian archive that apt uses for SUITE, from
# sources.list (one-line format) or sources.list.d (either format).
apt_mirror() {
  local suite="$1" file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    awk -v suite="$suite" '
      /^[[:space:]]*deb[[:space:]]/ {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit }
      }
      /^URIs:/ { uris = $2 }
      /^Suites:/ { for (j = 2; j <= NF; j++) if ($j == suite) found = 1 }
      /^[[:space:]]*$/ { if (found && uris != "") { print uris; exit } uris = ""; found = 0 }
      END { if (found && uris != "") print uris }
    ' "$file" | head -n 1
  done | head -n 1
}

image_exists() {
  if [ "$engine" = podman ]; then
    podman image exists "$1"
  else
    docker image inspect "$1" >/dev/null 2>&1
  fi
}

make_base() {
  command -v debootstrap >/dev/null || {
    say "no $base and no debootstrap: the build pulls the base from a registry"
    return 0
  }
  [ "$(id -u)" -eq 0 ] || die "making the debian:12 base with debootstrap needs root" \
    "(or pull it: $engine pull $base)"
  local archive="${mirror:-$(apt_mirror bookworm)}"
  archive="${archive:-http://deb.debian.org/debian}"
  local security
  security="$(apt_mirror bookworm-security)"
  security="${security:-http://deb.debian.org/debian-security}"
  local root
  root="$(mktemp -d "${TMPDIR:-/var/tmp}/dedupd-base.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$root'" EXIT
  local started=$SECONDS
  say "making $base: debootstrap --variant=minbase bookworm from $archive (a few minutes)"
  debootstrap --variant=minbase bookworm "$root" "$archive" 2>&1 |
    awk '/^I: [A-Z][a-z]+ / { if ($2 == phase) { n++; next } if (n) print "  (" n " more)"; phase = $2; n = 0 }
         /^(I|W|E): / { print "  " $0; fflush() }
         END { if (n) print "  (" n " more)" }' || true
  [ -x "$root/usr/bin/apt-get" ] || die "debootstrap did not produce a Debian system in $root"
  # apt as in Debian's official image: the three suites, no cached packages.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $archive
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
  say "importing $base"
  tar --numeric-owner -C "$root" -c . | "$engine" import --change 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf "$root"
  trap - EXIT
  say "$base made in $((SECONDS - started)) s"
}

if image_exists "$base"; then
  say "base $base present"
else
  make_base
fi
[ "$base_only" -eq 1 ] && exit 0

# small_context DIR: a build context of only what the runtime and prebuilt
# stages copy (the build stage, which copies everything, is not built).
small_context() {
  mkdir -p "$1/deploy/prebuilt"
  cp Dockerfile .dockerignore "$1/"
  cp deploy/install-deps.sh deploy/dedupd.textproto deploy/docker-entrypoint.sh "$1/deploy/"
}

started=$SECONDS
if [ "$warm" -eq 1 ]; then
  context="$(mktemp -d "${TMPDIR:-/tmp}/dedupd-image.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$context'" EXIT
  small_context "$context"
  say "building the runtime stage (target runtime, untagged: a layer cache)"
  "$engine" build "${build_flags[@]}" --target runtime -f "$context/Dockerfile" "$context" >/dev/null
  say "runtime stage cached in $((SECONDS - started)) s"
  exit 0
fi
if [ -n "$prebuilt" ]; then
  prebuilt="$(from_caller "$prebuilt")"
  [ -d "$prebuilt" ] || die "--prebuilt $prebuilt: no such build directory"
  for binary in server/dedupd client/dedupctl; do
    [ -x "$prebuilt/$binary" ] || die "--prebuilt: $prebuilt/$binary is missing; build it" \
      "first (deploy/build.sh dedupd dedupctl)"
  done
  context="$(mktemp -d "${TMPDIR:-/tmp}/dedupd-image.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$context'" EXIT
  small_context "$context"
  for binary in server/dedupd client/dedupctl; do
    strip --strip-debug -o "$context/deploy/prebuilt/${binary#*/}" "$prebuilt/$binary"
  done
  say "building $tag from the binaries in $prebuilt (target prebuilt)"
  "$engine" build "${build_flags[@]}" --target prebuilt -t "$tag" -f "$context/Dockerfile" "$context"
else
  say "building $tag, compiling in the image's build stage (many minutes)"
  "$engine" build "${build_flags[@]}" -t "$tag" -f Dockerfile .
fi
size="$("$engine" image inspect --format '{{.Size}}' "$tag")"
say "built $tag in $((SECONDS - started)) s: $((size / 1000000)) MB"
