#!/usr/bin/env bash
# Fails when a C++ file of the repository differs from .clang-format.
#   check_format.sh SOURCE_DIR
# Fix with: clang-format -i $(git ls-files '*.cc' '*.h')
set -euo pipefail
src="${1:?usage: check_format.sh SOURCE_DIR}"
cd "$src"
command -v clang-format >/dev/null || { echo "clang-format not found (deploy/install-deps.sh installs it)" >&2; exit 1; }

# Every C++ file under the project's own folders; generated code lives in
# build directories and is not ours to format.
mapfile -t files < <(find CMakeLists.txt proto server client storage tests bench \
  -type f \( -name '*.cc' -o -name '*.h' \) 2>/dev/null | sort)
if [ "${#files[@]}" -lt 50 ]; then
  echo "check_format: found only ${#files[@]} C++ files under $src; wrong directory?" >&2
  exit 1
fi
# One clang-format for every file (one per file spent 35 s starting
# processes). Each line it would change is reported as
# "FILE:LINE:COL: error: code should be clang-formatted".
report="$(clang-format --dry-run --Werror "${files[@]}" 2>&1)" && status=0 || status=$?
mapfile -t bad < <(printf '%s\n' "$report" |
  sed -nE 's/^(.+):[0-9]+:[0-9]+: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "$status" -ne 0 ] && [ "${#bad[@]}" -eq 0 ]; then
  echo "check_format: clang-format failed:" >&2
  printf '%s\n' "$report" | head -n 20 >&2
  exit 1
fi
if [ "${#bad[@]}" -ne 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files match .clang-format"
