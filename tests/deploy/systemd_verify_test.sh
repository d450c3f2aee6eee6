#!/usr/bin/env bash
# Checks deploy/systemd/batond.service with `systemd-analyze verify`, pointing ExecStart at the
# freshly built batond. Exits 77 (skipped) where systemd-analyze is not installed.
set -euo pipefail
unit=$1
batond=$2
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/bin/batond|$batond|" "$unit" > "$dir/batond.service"
out=$(systemd-analyze verify "$dir/batond.service" 2>&1 || true)
# Lines about units outside ours (the host's own configuration) are not ours to judge.
ours=$(grep -F "batond.service" <<<"$out" || true)
if [ -n "$ours" ]; then
  echo "$ours"
  exit 1
fi
grep -q '^Type=notify$' "$unit"
grep -q '^WatchdogSec=' "$unit"
grep -q '^RuntimeDirectory=baton$' "$unit"
grep -q '^LimitMEMLOCK=infinity$' "$unit"
if grep -q '^PrivateDevices=yes' "$unit"; then echo "PrivateDevices hides /dev/infiniband"; exit 1; fi
echo "batond.service verified"
