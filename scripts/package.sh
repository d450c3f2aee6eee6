#!/usr/bin/env bash
# Builds the Debian package baton_<VERSION>_<arch>.deb from a configured build directory and
# prints its path. Usage: scripts/package.sh [BUILD_DIR] (default: build/ of this checkout).
# Builds whatever is out of date first (the package holds everything `cmake --install`
# installs). Needs dpkg-dev (dpkg-shlibdeps computes Depends) and help2man (man pages).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath "${1:-$repo/build}")
if [ ! -f "$dir/CPackConfig.cmake" ]; then
  echo "package.sh: $dir is not a configured build directory (no CPackConfig.cmake)" >&2
  exit 2
fi
command -v dpkg-shlibdeps >/dev/null || { echo "package.sh: dpkg-shlibdeps missing (apt-get install dpkg-dev)" >&2; exit 2; }

# Debian's prefix: GNUInstallDirs then puts libraries in lib/<multiarch> (with any other prefix,
# lib/). It is chosen when the build directory is configured, so an existing one is switched
# (nothing is compiled with the prefix: no rebuild).
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$dir/CMakeCache.txt")
if [ "$prefix" != /usr ]; then
  echo "package.sh: configuring $dir with CMAKE_INSTALL_PREFIX=/usr (was $prefix)" >&2
  cmake -DCMAKE_INSTALL_PREFIX=/usr "$dir" >/dev/null
fi
cmake --build "$dir" >&2
log=$(cd "$dir" && cpack -G DEB 2>&1) || { echo "$log" >&2; exit 1; }
# CPack's last word: "CPack: - package: /path/baton_0.1.0_amd64.deb generated."
deb=$(sed -n 's/^CPack: - package: \(.*\.deb\) generated\.$/\1/p' <<<"$log" | tail -n 1)
if [ -z "$deb" ] || [ ! -f "$deb" ]; then
  echo "$log" >&2
  echo "package.sh: cpack made no .deb" >&2
  exit 1
fi
echo "$deb"
