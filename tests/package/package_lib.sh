# shellcheck shell=bash
# Shared by the package tests (sourced). The tests that need the package and the image call
# package_image once: it makes the .deb of the build as it is (scripts/package.sh --no-build)
# and, when the package's contents or the image recipe changed since the last run, the image
# (deploy/container/build.sh) under BUILD_DIR/package-test/, one test at a time (flock), so the
# two tests share one image build.

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Skips (exit 77) unless this is root with mmdebstrap and umoci, and Debian's archive answers.
require_image_tools() {
  [ "$(id -u)" -eq 0 ] || skip "needs root (chroot, mmdebstrap)"
  local tool
  for tool in mmdebstrap umoci dpkg-deb flock; do
    command -v "$tool" >/dev/null || skip "$tool not installed (scripts/setup.sh installs it)"
  done
  local mirror=${BATON_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  python3 - "$mirror/dists/bookworm/InRelease" 2>/dev/null <<'PY' || skip "Debian archive $mirror unreachable"
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=10).read(1)
PY
}

# package_image SOURCE_DIR BUILD_DIR: sets deb, rootfs and image (the OCI archive).
package_image() {
  local source_dir=$1 build_dir=$2 work version key
  work=$build_dir/package-test
  version=$(cat "$source_dir/VERSION")
  mkdir -p "$work"
  exec 9>"$work/lock"
  flock -w 900 9 || fail "waited 15 minutes for another test's image build"
  deb=$("$source_dir/scripts/package.sh" --no-build "$build_dir" 2>"$work/package.log") ||
    { tail -n 40 "$work/package.log"; fail "scripts/package.sh failed"; }
  # The package's control fields and file checksums, and the image recipe: not the .deb's
  # bytes, whose timestamps change every time CPack runs.
  key=$({ dpkg-deb -f "$deb"; dpkg-deb -I "$deb" md5sums
          cat "$source_dir/deploy/container/Containerfile" "$source_dir/deploy/container/build.sh"
        } | sha256sum | cut -d' ' -f1)
  rootfs=$work/container/context/rootfs.tar
  image=$work/container/batond_$version.oci.tar
  if [ -f "$rootfs" ] && [ -f "$image" ] && [ "$(cat "$work/key" 2>/dev/null)" = "$key" ]; then
    echo "package_image: reusing the image of $(basename "$deb") in $work/container"
  else
    rm -f "$work/key"
    local start=$SECONDS
    "$source_dir/deploy/container/build.sh" --no-podman --deb "$deb" "$work" \
      >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; fail "deploy/container/build.sh failed"; }
    echo "$key" > "$work/key"
    echo "package_image: built the image in $((SECONDS - start)) s"
  fi
  exec 9>&-
}

# A scratch directory for a root file system, removed on exit after everything mounted below it
# is unmounted. mount_in ROOT TYPE SOURCE PATH mounts into it; cleanup runs on every exit path.
scratch_root() {
  root=$(mktemp -d "${TMPDIR:-/tmp}/baton-package-test.XXXXXX")
  trap cleanup_root EXIT
  trap 'exit 130' INT TERM
}
mounted=()
mount_in() {
  local root=$1 type=$2 source=$3 path=$4
  mkdir -p "$root$path"
  mount -t "$type" "$source" "$root$path" || fail "mount -t $type $source $root$path"
  mounted+=("$root$path")
}
cleanup_root() {
  local rc=$? i
  [ "$(type -t stop_daemon)" = function ] && stop_daemon
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
  done
  if [ -n "${root:-}" ] && [ -d "$root" ]; then
    if grep -qF " $root/" /proc/mounts; then
      echo "cleanup: something is still mounted below $root; left in place" >&2
      rc=1
    else
      rm -rf --one-file-system "$root"
    fi
  fi
  exit $rc
}
