#!/usr/bin/env bash
# The container image serves: its OCI archive (deploy/container/build.sh) is unpacked with umoci
# as a runtime would, and the image's own command (entrypoint + cmd from its configuration),
# with every listener moved to 127.0.0.1 port 0 and the socket into a scratch directory, runs in
# a chroot of the unpacked root (podman run does not work in this sandbox). /healthz must answer
# 200 and /metrics name VERSION; SIGTERM must stop it, leaving nothing running in the root. Also
# checks that the image holds no apt lists, caches or other packages' documentation.
# Usage: image_test.sh SOURCE_DIR BUILD_DIR. Skipped (77) without root, mmdebstrap, umoci or
# Debian's archive.
set -euo pipefail
source_dir=$1
build_dir=$2
source "$(dirname "$0")/package_lib.sh"
require_image_tools
version=$(cat "$source_dir/VERSION")
package_image "$source_dir" "$build_dir"

start=$SECONDS
pid=""
# Running, and not a zombie waiting for this shell's wait.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
stop_daemon() {
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  if alive "$pid"; then
    echo "batond (pid $pid) still running 20 s after SIGTERM: killed" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  pid=""
}
scratch_root
mkdir "$root/oci"
tar -xf "$image" -C "$root/oci"
umoci unpack --image "$root/oci:$version" "$root/bundle" >/dev/null
rootfs=$root/bundle/rootfs

# What the image holds.
size=$(du -sm "$rootfs" | cut -f1)
echo "image root: $size MiB"
[ "$size" -lt 200 ] || fail "image root is $size MiB"
# (apt's empty lock files and partial/ directories stay: mmdebstrap leaves them.)
for dir in var/lib/apt/lists var/cache/apt var/log usr/share/locale usr/share/info; do
  found=$(find "$rootfs/$dir" -type f -size +0 2>/dev/null | head -n 3)
  [ -z "$found" ] || fail "image holds files in /$dir: $found"
done
others=$(cd "$rootfs/usr/share/doc" && find . -type f ! -path './baton/*' ! -name copyright)
[ -z "$others" ] || fail "image holds other packages' documentation: $others"
others=$(cd "$rootfs/usr/share/man" && find . -type f ! -name 'baton.1.gz' ! -name 'batond.8.gz')
[ -z "$others" ] || fail "image holds other packages' man pages: $others"

# The image's command, as the runtime spec umoci wrote says.
mapfile -t command < <(python3 -c '
import json, sys
print("\n".join(json.load(open(sys.argv[1]))["process"]["args"]))' "$root/bundle/config.json")
[ "${command[0]}" = /usr/bin/batond ] || fail "image runs '${command[*]}', not /usr/bin/batond"
echo "image command: ${command[*]}"

# A container's /proc and /dev/shm (batond reads /proc; ranks' buffers live in /dev/shm).
mount_in "$rootfs" proc proc /proc
mount_in "$rootfs" tmpfs tmpfs /dev/shm
mkdir -p "$rootfs/run/baton-test"
chroot "$rootfs" "${command[@]}" \
  --socket=/run/baton-test/batond.sock --ready-file=/run/baton-test/ready \
  --peer-listen=127.0.0.1:0 --data-listen=127.0.0.1:0 --metrics-listen=127.0.0.1:0 \
  --advertise-host=127.0.0.1 --node-name=image-test --probe-interval=0 \
  > "$root/batond.log" 2>&1 &
pid=$!

# The ready file names the HTTP address once everything serves; then /healthz must say 200.
deadline=$((SECONDS + 30))
until [ -s "$rootfs/run/baton-test/ready" ]; do
  alive "$pid" || { cat "$root/batond.log" >&2; fail "batond exited"; }
  [ $SECONDS -lt $deadline ] || { cat "$root/batond.log" >&2; fail "batond not ready in 30 s"; }
  sleep 0.1
done
address=$(sed -n 's/^metrics_address=//p' "$rootfs/run/baton-test/ready")
case $address in
  127.0.0.1:[0-9]*) ;;
  *) fail "batond serves HTTP on '$address', not on loopback" ;;
esac
python3 - "http://$address" "$version" <<'PY' || { cat "$root/batond.log" >&2; fail "HTTP checks"; }
import sys, time, urllib.request
base, version = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 20
while True:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
            if response.status == 200:
                break
    except OSError as error:
        last = error
    if time.monotonic() > deadline:
        sys.exit(f"/healthz did not answer 200 within 20 s: {last}")
    time.sleep(0.1)
print("/healthz: 200")
metrics = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
line = next((l for l in metrics.splitlines() if l.startswith("baton_build_info{")), None)
if line is None or f'version="{version}"' not in line:
    sys.exit(f"/metrics: baton_build_info is {line!r}, VERSION is {version}")
print(line)
PY

# SIGTERM stops it within its grace period; nothing may be left running in the root.
daemon_pid=$pid
stop_start=$SECONDS
stop_daemon
echo "batond stopped $((SECONDS - stop_start)) s after SIGTERM"
[ ! -e "$rootfs/run/baton-test/batond.sock" ] || fail "socket left behind"
left=""
for proc in /proc/[0-9]*; do
  [ "$(readlink "$proc/root" 2>/dev/null)" = "$rootfs" ] && left+=" ${proc#/proc/}"
done
[ -z "$left" ] || fail "processes still running in the image root:$left"
grep -q "batond $version serving" "$root/batond.log" || fail "no 'serving' line in batond's log"
echo "image_test: passed (pid $daemon_pid; $((SECONDS - start)) s after the image build)"
