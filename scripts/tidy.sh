#!/usr/bin/env bash
# Runs clang-tidy with the repository's .clang-tidy over every C++ source outside tests/ (headers
# through HeaderFilterRegex), using BUILD_DIR's compile_commands.json. Any finding fails.
# Usage: scripts/tidy.sh [BUILD_DIR] (default build; it must have been configured and built,
# since sources include generated headers).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
[ -f "$dir/compile_commands.json" ] || { echo "tidy: no $dir/compile_commands.json" >&2; exit 2; }
tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
[ -n "$tidy" ] || { echo "tidy: clang-tidy not found (scripts/setup.sh installs it)" >&2; exit 2; }
# The sources the build compiles (so options of disabled targets, such as CUDA without nvcc,
# are not checked against a missing toolchain).
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' ':!:tests/**' |
  while read -r f; do
  grep -q "\"file\": \"$PWD/$f\"" "$dir/compile_commands.json" && echo "$f"
done)
[ ${#files[@]} -gt 0 ] || { echo "tidy: no sources found in $dir" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -n 4 "$tidy" -p "$dir" --quiet --warnings-as-errors='*' >"$out" 2>&1 ||
  status=$?
findings=$(grep -cE '(warning|error): ' "$out" || true)
if [ "${status:-0}" -ne 0 ] || [ "$findings" -gt 0 ]; then
  grep -E -A3 '(warning|error): ' "$out" | head -200 || true
  echo "tidy: $findings findings in ${#files[@]} files" >&2
  exit 1
fi
echo "tidy: ${#files[@]} files clean"
