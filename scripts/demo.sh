#!/usr/bin/env bash
# Baton's main job: sets up and builds, starts a local cluster of 4 batond daemons, runs an
# all-reduce benchmark over 8 ranks (2 per daemon) from 8 B to 64 MiB with every element checked,
# prints the table, and stops the cluster, leaving nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build

export BATON_LOCAL_DIR
BATON_LOCAL_DIR=$(mktemp -d /tmp/baton-demo-XXXXXX)
cleanup() {
  build/bin/baton local down || true
  if [ "${keep_logs:-0}" = 1 ]; then
    echo "daemon logs kept in $BATON_LOCAL_DIR"
  else
    rm -rf "$BATON_LOCAL_DIR"
  fi
}
trap cleanup EXIT

build/bin/baton local up --nodes 4
keep_logs=1
build/bin/baton bench -b 8 -e 64M -f 2 -n 20 -w 5 -c 1 --ranks-per-daemon 2
keep_logs=0
