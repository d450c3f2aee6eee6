#!/usr/bin/env bash
# Builds the image the DaemonSet runs, baton/batond:<VERSION>, from the Debian package, with no
# registry but Debian's archive:
#   1. mmdebstrap makes a Debian bookworm root (essential packages) and installs the .deb into
#      it with apt (run from outside: the image has no apt), which resolves its Depends from
#      Debian; docs, man pages and locales of other packages are left out, apt's lists and
#      caches are empty, and the build host's resolv.conf and hostname removed. -> rootfs.tar
#   2. umoci makes an OCI image of that root, configured from Containerfile. -> an OCI archive
#   3. where podman is installed, `podman build` of Containerfile puts the same image into
#      podman's store as localhost/baton/batond:<VERSION>.
#
# Usage: deploy/container/build.sh [--deb FILE] [--no-podman] [BUILD_DIR]
#   The .deb is FILE, or scripts/package.sh BUILD_DIR builds it (BUILD_DIR defaults to build/).
#   Outputs, in BUILD_DIR/container/ (the directory of FILE with --deb and no BUILD_DIR):
#     context/rootfs.tar          the image's root file system (Containerfile ADDs it)
#     batond_<VERSION>.oci.tar    OCI archive (an OCI layout, tag <VERSION>)
#   and prints the OCI archive's path. --no-podman skips step 3 (the tests do).
# Environment: BATON_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#   BATON_DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security).
# Needs root, mmdebstrap and umoci (Debian packages of those names); podman is optional.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
die() { echo "build.sh: $*" >&2; exit 1; }
deb=""
dir=""
use_podman=1
while [ $# -gt 0 ]; do
  case $1 in
    --deb) [ $# -ge 2 ] || die "--deb needs a file"; deb=$(realpath "$2"); shift 2 ;;
    --no-podman) use_podman=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) dir=$(realpath "$1"); shift ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap installs packages into a chroot)"
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || die "$tool missing (apt-get install $tool)"
done

version=$(cat "$repo/VERSION")
if [ -z "$deb" ]; then
  dir=${dir:-$repo/build}
  deb=$("$repo/scripts/package.sh" "$dir")
fi
out=${dir:-$(dirname "$deb")}/container
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] ||
  die "$deb is version $(dpkg-deb -f "$deb" Version), VERSION says $version"
mkdir -p "$out/context"
echo "build.sh: $deb -> $out" >&2

# 1. The root. The package's own files (docs and man pages included) are all kept.
mirror=${BATON_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${BATON_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
rootfs=$out/context/rootfs.tar
hooks=/usr/share/mmdebstrap/hooks
# What the path filters below cannot keep out (files of the packages mmdebstrap unpacks before
# dpkg reads them), and the build host's hostname and resolv.conf (the runtime provides both).
prune='cd "$1" &&
  find usr/share/doc ! -type d ! -name copyright ! -path "usr/share/doc/baton/*" -delete &&
  find usr/share/man ! -type d ! -name baton.1.gz ! -name batond.8.gz -delete &&
  rm -rf usr/share/locale/* usr/share/info/* var/cache/debconf/*-old var/lib/dpkg/*-old \
    etc/hostname etc/resolv.conf'
# mmdebstrap works in a directory under TMPDIR; when it fails it can leave the .deb bind-mounted
# there (seen with mmdebstrap 1.3.5): unmount whatever is left below it on every exit.
tmp=$out/tmp
unmount_below() {
  awk -v dir="$1/" 'index($2, dir) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r path; do umount "$path" || umount -l "$path"; done
}
cleanup() { unmount_below "$tmp"; rm -rf --one-file-system "$tmp"; }
cleanup
trap cleanup EXIT
mkdir -p "$tmp"
TMPDIR=$tmp mmdebstrap --variant=essential --quiet \
  --hook-dir="$hooks/merged-usr" \
  --hook-dir="$hooks/file-mirror-automount" \
  --include="$deb" \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-include=/usr/share/doc/baton/*' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-include=/usr/share/man/man1/' \
  --dpkgopt='path-include=/usr/share/man/man1/baton.1.gz' \
  --dpkgopt='path-include=/usr/share/man/man8/' \
  --dpkgopt='path-include=/usr/share/man/man8/batond.8.gz' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook="$prune" \
  bookworm "$out/context/rootfs.tmp.tar" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main" >&2
mv "$out/context/rootfs.tmp.tar" "$rootfs"

# 2. The OCI image: the root as its one layer, the configuration from the Containerfile.
mapfile -d '' config < <(python3 - "$here/Containerfile" "$version" <<'EOF'
import json, shlex, sys
path, version = sys.argv[1], sys.argv[2]
lines, pending = [], ""
for raw in open(path):
    line = raw.rstrip("\n")
    if not pending and (not line.strip() or line.lstrip().startswith("#")):
        continue
    if line.endswith("\\"):
        pending += line[:-1] + " "
        continue
    lines.append(pending + line)
    pending = ""
args = []
def fail(line):
    sys.exit(f"build.sh: {path}: umoci cannot follow '{line}'")
for line in lines:
    op, _, rest = line.strip().partition(" ")
    rest = rest.strip().replace("${VERSION}", version)
    if op == "FROM" and rest == "scratch" or op == "ARG" and rest == "VERSION":
        continue
    if op == "ADD" and rest == "rootfs.tar /":
        continue
    if op in ("ENTRYPOINT", "CMD"):
        words = json.loads(rest)
        args += [f"--config.{op.lower()}={w}" for w in words]
    elif op == "ENV":
        if "=" not in rest or " " in rest:
            fail(line)
        args += [f"--config.env={rest}"]
    elif op == "EXPOSE":
        args += [f"--config.exposedports={p}" for p in rest.split()]
    elif op == "STOPSIGNAL":
        args += [f"--config.stopsignal={rest}"]
    elif op == "LABEL":
        words = shlex.split(rest)
        if len(words) != 1 or "=" not in words[0]:
            fail(line)
        args += [f"--config.label={words[0]}"]
    else:
        fail(line)
sys.stdout.write("".join(a + "\0" for a in args))
EOF
)
[ ${#config[@]} -gt 0 ] || die "no image configuration read from $here/Containerfile"
layout=$out/oci
rm -rf "$layout"
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci raw add-layer --image "$layout:$version" \
  --history.created_by="mmdebstrap bookworm + $(basename "$deb") (deploy/container/build.sh)" "$rootfs"
umoci config --image "$layout:$version" --os=linux --architecture="$(dpkg --print-architecture)" \
  --author="Baton (deploy/container/build.sh)" --no-history "${config[@]}"
umoci gc --layout "$layout"
archive=$out/batond_$version.oci.tar
tar -C "$layout" -cf "$archive.tmp" .
mv "$archive.tmp" "$archive"
rm -rf "$layout"

# 3. podman's store, from the Containerfile itself.
if [ "$use_podman" = 1 ] && command -v podman >/dev/null; then
  # The previous build of this tag would stay behind untagged.
  podman rmi --ignore "baton/batond:$version" >/dev/null
  podman build --quiet --layers=false --file "$here/Containerfile" --build-arg "VERSION=$version" \
    --tag "baton/batond:$version" "$out/context" >&2
  echo "build.sh: podman has localhost/baton/batond:$version" >&2
fi
echo "$archive"
