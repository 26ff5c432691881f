#!/usr/bin/env bash
# Checks that optgen's own C++ sources are formatted as .clang-format says; with --fix, formats
# them. Generated code (generated/, build folders) is the emitters' to format, and templates/ are
# not C++ until filled. Usage: scripts/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check_format.sh: $clang_format not found; install Debian's clang-format (./test.sh does)" >&2
  exit 2
fi
mapfile -t files < <(find generator runtime spec_loader tools tests bench examples \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \) \
  -not -path 'tests/data/*' | sort)
if [ "${1:-}" = "--fix" ]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
report=$(mktemp)
trap 'rm -f "$report"' EXIT
if ! "$clang_format" --dry-run -Werror "${files[@]}" 2> "$report"; then
  grep -E '^[^ ].*: error:' "$report" | sed 's/:[0-9]*:[0-9]*: error:.*//' | sort -u | head -40
  echo "check_format.sh: the files above are not formatted as .clang-format says; run scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files formatted as .clang-format says"
