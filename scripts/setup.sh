#!/usr/bin/env bash
# Installs the Debian 12 packages Baton builds and tests with, then the tests' Python packages
# into a venv outside the clone (scripts/setup_python.sh). Idempotent: does nothing when
# everything is already installed. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git clang-format clang-tidy ccache
  clang libclang-rt-14-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev prometheus-cpp-dev libcivetweb-dev libssl-dev
  libgtest-dev libgmock-dev libhwloc-dev libibverbs-dev
  iproute2 procps prometheus
  help2man dpkg-dev mmdebstrap umoci
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # prometheus (promtool and a server for tests/deploy) comes with prometheus.service enabled
  # and listening on every interface at :9090; the tests start their own on loopback, so a
  # service this script just installed is stopped and disabled. An earlier install is untouched.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    echo "setup: disabled prometheus.service (the tests run their own Prometheus)"
  fi
  echo "setup: done"
fi

# Python packages of the tests (pinned by tests/requirements.txt), in their own venv.
bash "$(dirname "$0")/setup_python.sh"
