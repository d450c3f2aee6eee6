#!/usr/bin/env bash
# Builds the Debian package baton_<VERSION>_<arch>.deb from a configured build directory and
# prints its path. Usage: scripts/package.sh [--no-build] [BUILD_DIR] (default: build/ of this
# checkout). Needs dpkg-dev (dpkg-shlibdeps computes Depends) and help2man (man pages).
#
# First it switches BUILD_DIR to Debian's prefix, /usr, if it was configured with another one
# (GNUInstallDirs then puts libraries in lib/<multiarch> instead of lib/; nothing is compiled
# with the prefix, so nothing is rebuilt), and builds what is out of date: the package holds
# everything `cmake --install` installs. --no-build packages the build directory as it is,
# changing nothing in it but the package; the tests do that, since other tests read the same
# build directory at the same time.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=1
if [ "${1:-}" = --no-build ]; then
  build=0
  shift
fi
dir=$(realpath "${1:-$repo/build}")
die() { echo "package.sh: $*" >&2; exit 2; }
[ -f "$dir/CPackConfig.cmake" ] || die "$dir is not a configured build directory (no CPackConfig.cmake)"
command -v dpkg-shlibdeps >/dev/null || die "dpkg-shlibdeps missing (apt-get install dpkg-dev)"

prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$dir/CMakeCache.txt")
if [ "$build" = 1 ]; then
  if [ "$prefix" != /usr ]; then
    echo "package.sh: configuring $dir with CMAKE_INSTALL_PREFIX=/usr (was $prefix)" >&2
    cmake -DCMAKE_INSTALL_PREFIX=/usr "$dir" >/dev/null
  fi
  cmake --build "$dir" >&2
elif [ "$prefix" != /usr ]; then
  echo "package.sh: $dir has prefix $prefix: libraries go to /usr/lib, not /usr/lib/<multiarch>" >&2
fi
log=$(cd "$dir" && cpack -G DEB 2>&1) || { echo "$log" >&2; exit 1; }
# CPack's last word: "CPack: - package: /path/baton_0.1.0_amd64.deb generated."
deb=$(sed -n 's/^CPack: - package: \(.*\.deb\) generated\.$/\1/p' <<<"$log" | tail -n 1)
if [ -z "$deb" ] || [ ! -f "$deb" ]; then
  echo "$log" >&2
  die "cpack made no .deb"
fi
echo "$deb"
