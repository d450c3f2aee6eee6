#!/usr/bin/env bash
# Installs the npm packages the tests use, at the exact versions of their package-lock.json:
# tests/deploy/k8s_schema (the Kubernetes and prometheus-operator schemas for k8s_schema_test).
# Called by scripts/setup.sh. Idempotent: does nothing when node_modules matches the lock file.
# Installs Debian's nodejs and npm first where there is no node. Tests never install anything.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing nodejs npm"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

for dir in tests/deploy/k8s_schema; do
  stamp="$dir/node_modules/.baton-lock.sha256"
  want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "setup: $dir/node_modules up to date"
    continue
  fi
  echo "setup: npm ci in $dir"
  # --loglevel=error: the kubernetes-models packages declare node >= 22 and print an
  # EBADENGINE warning on node 20; k8s_schema_test itself shows that they work there.
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$want" >"$stamp"
done
