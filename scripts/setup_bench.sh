#!/usr/bin/env bash
# Installs the Debian 12 packages that only the peer benchmarks need (scripts/compare_allreduce.sh):
# Gloo (libgloo-dev) and Open MPI (openmpi-bin, libopenmpi-dev). Not part of scripts/setup.sh:
# neither CI nor the tests need them, and CMake skips the benchmark targets without them.
# Idempotent: does nothing when everything is already installed. Needs root (or sudo).
set -euo pipefail

packages=(libgloo-dev openmpi-bin libopenmpi-dev iproute2 python3)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup_bench: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup_bench: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup_bench: done"
