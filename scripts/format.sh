#!/usr/bin/env bash
# Formats every C++ source with clang-format (.clang-format), or with --check reports files that
# differ and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -co --exclude-standard '*.h' '*.hpp' '*.c' '*.cc' '*.cpp' '*.cu')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run -Werror "${files[@]}"
  echo "format: ${#files[@]} files clean"
else
  clang-format -i "${files[@]}"
fi
