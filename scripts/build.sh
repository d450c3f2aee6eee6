#!/usr/bin/env bash
# Configures and builds Baton. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR is build/. Warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
jobs=$(nproc)
# A compiler cache outside the clone (ccache's own directory, ~/.cache/ccache) makes a rebuild
# on a machine that built Baton before mostly cache hits; BATON_CCACHE=0 turns it off.
launcher=()
if [ "${BATON_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_WERROR=ON \
    "${launcher[@]}" "$@" >/dev/null
fi
cmake --build "$dir" -j "$jobs"
