#!/usr/bin/env bash
# The Debian package in a clean Debian 12 root: apt installs it with its Depends (the image's
# root, made by mmdebstrap from Debian's archive: package_lib.sh), its binaries run and find
# every library they need, the installed unit passes `systemd-analyze verify`, the conffile and man pages
# are where they belong, and a reinstall keeps an edited conffile. The library: libbaton.so.0
# (SONAME, symlinks, baton_* exported only), its headers, baton.pc and CMake package; then
# examples/allreduce.c, compiled on this host against the root's headers and libbaton.so only
# (pkg-config reading the root's baton.pc), runs 2 ranks of an all-reduce in the root through the
# installed batond (loopback only), which SIGTERM then stops. `dpkg --purge baton` then leaves
# none of the files dpkg listed for it.
# Usage: deb_install_test.sh SOURCE_DIR BUILD_DIR. Skipped (77) without root, mmdebstrap, umoci
# or Debian's archive.
set -euo pipefail
source_dir=$1
build_dir=$2
source "$(dirname "$0")/package_lib.sh"
require_image_tools
command -v systemd-analyze >/dev/null || skip "systemd-analyze not installed"
version=$(cat "$source_dir/VERSION")
package_image "$source_dir" "$build_dir"

start=$SECONDS
scratch_root
tar -xpf "$rootfs" -C "$root" --numeric-owner
in_root() { chroot "$root" "$@"; }

# What apt installed, and what the package says.
[ "$(in_root dpkg-query -W -f='${db:Status-Status} ${Version}' baton)" = "installed $version" ] ||
  fail "baton $version is not installed in the root"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
grep -q 'libc6 (>= ' <<<"$depends" || fail "Depends has no versioned libc6: $depends"
conffiles=$(in_root dpkg-query -W -f='${Conffiles}' baton)
grep -q '^ /etc/baton/batond.conf [0-9a-f]\{32\}$' <<<"$conffiles" ||
  fail "/etc/baton/batond.conf is not a conffile: '$conffiles'"

# The binaries run, and Depends brought every library they need.
for bin in /usr/bin/batond /usr/bin/baton; do
  missing=$(in_root ldd "$bin" | grep 'not found' || true)
  [ -z "$missing" ] || fail "$bin: libraries not found:"$'\n'"$missing"
done
help=$(in_root /usr/bin/batond --help) || fail "batond --help failed"
grep -q '^Usage: batond' <<<"$help" || fail "batond --help: no usage line"
help=$(in_root /usr/bin/baton --help) || fail "baton --help failed"
grep -q '^Usage: baton <command>' <<<"$help" || fail "baton --help: no usage line"
for bin in batond baton; do
  out=$(in_root /usr/bin/$bin --version 2>&1) || fail "$bin --version failed: $out"
  [ "$out" = "$bin $version" ] || fail "$bin --version says '$out', VERSION is $version"
done

# The installed layout.
for path in /usr/bin/batond /usr/bin/baton /lib/systemd/system/batond.service \
  /etc/baton/batond.conf /usr/share/man/man8/batond.8.gz /usr/share/man/man1/baton.1.gz \
  /usr/share/doc/baton/copyright /usr/share/doc/baton/README.md /usr/share/doc/baton/deploy.md; do
  [ -f "$root$path" ] || fail "$path missing"
done
cmp -s "$root/etc/baton/batond.conf" "$source_dir/deploy/systemd/batond.conf" ||
  fail "/etc/baton/batond.conf differs from deploy/systemd/batond.conf"
for page in man8/batond.8.gz man1/baton.1.gz; do
  zcat "$root/usr/share/man/$page" | grep -q '^\.SH' || fail "$page is not a man page"
done
zcat "$root/usr/share/man/man8/batond.8.gz" | grep -qF 'metrics\-listen' ||
  fail "batond.8 does not list batond's options"

# The unit as installed. `systemd-analyze verify --root=ROOT` needs systemd's own units in the
# root ("Unit sysinit.target not found"), which has no systemd: the host's systemd-analyze checks
# the installed file, its ExecStart pointed at the installed batond.
unit=$root/lib/systemd/system/batond.service
grep -q '^ExecStart=/usr/bin/batond ' "$unit" || fail "the unit does not run /usr/bin/batond"
mkdir "$root/.verify"
sed "s|^ExecStart=/usr/bin/batond |ExecStart=$root/usr/bin/batond |" "$unit" > "$root/.verify/batond.service"
out=$(systemd-analyze verify "$root/.verify/batond.service" 2>&1) ||
  fail "systemd-analyze verify:"$'\n'"$out"
ours=$(grep -F batond.service <<<"$out" || true)
[ -z "$ours" ] || fail "systemd-analyze verify:"$'\n'"$ours"
rm -r "$root/.verify"

# A conffile: reinstalling the package keeps the administrator's edit (without asking).
echo "log_level = debug  # local edit" >> "$root/etc/baton/batond.conf"
cp "$deb" "$root/tmp/baton.deb"
in_root dpkg -i /tmp/baton.deb </dev/null >/dev/null || fail "reinstalling the package failed"
rm "$root/tmp/baton.deb"
grep -q '# local edit$' "$root/etc/baton/batond.conf" || fail "reinstalling lost the edit of the conffile"

# The library: libbaton.so and libbaton.so.0 lead to libbaton.so.VERSION, whose SONAME is
# libbaton.so.0 and which exports baton_* only (and its version node); the headers, baton.pc and
# the CMake package are installed beside it.
libdir=/usr/lib/x86_64-linux-gnu
library=$libdir/libbaton.so.$version
for path in "$library" /usr/include/baton/baton.h /usr/include/baton/baton.hpp \
  /usr/include/baton/version.h "$libdir/pkgconfig/baton.pc" "$libdir/cmake/Baton/BatonConfig.cmake"; do
  [ -f "$root$path" ] && [ ! -L "$root$path" ] || fail "$path missing (or not a plain file)"
done
for link in "$libdir/libbaton.so.0" "$libdir/libbaton.so"; do
  [ -L "$root$link" ] || fail "$link is not a symlink"
  target=$(in_root readlink -f "$link") || fail "$link does not resolve in the root"
  [ "$target" = "$library" ] || fail "$link leads to '$target', not $library"
done
soname=$(readelf -d "$root$library" | sed -n 's/^.*(SONAME) .*\[\(.*\)\]$/\1/p')
[ "$soname" = libbaton.so.0 ] || fail "$library has SONAME '$soname', not libbaton.so.0"
if readelf -d "$root$library" | grep -qE 'RPATH|RUNPATH'; then
  fail "$library keeps a run path: $(readelf -d "$root$library" | grep -E 'RPATH|RUNPATH')"
fi
symbols=$(nm -D --defined-only "$root$library" | awk '{ sub(/@.*/, "", $3); print $2, $3 }')
others=$(grep -vE '^[A-Za-z] baton_[a-z0-9_]+$|^A BATON_[0-9]+$' <<<"$symbols" || true)
[ -z "$others" ] || fail "$library exports more than baton_*:"$'\n'"$others"
for symbol in baton_version baton_client_connect baton_all_reduce; do
  grep -qx "T $symbol" <<<"$symbols" || fail "$library does not export $symbol"
done
echo "libbaton.so.0 -> libbaton.so.$version: SONAME $soname, $(grep -c ' baton_' <<<"$symbols") baton_* symbols, nothing else"

# A program of its own, written against the installed headers only: examples/allreduce.c,
# compiled on this host (the root has no compiler) with what pkg-config reads from the root's
# baton.pc, which computes its prefix from its own directory.
example=$root/.example
mkdir "$example"
cp "$source_dir/examples/allreduce.c" "$example/"
pkg_config() {
  env -u PKG_CONFIG_PATH -u PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR="$root$libdir/pkgconfig" \
    pkg-config "$@" baton || fail "pkg-config $* finds no baton in $root$libdir/pkgconfig"
}
flags=$(pkg_config --cflags)
read -r -a cflags <<<"$flags"
flags=$(pkg_config --libs)
read -r -a libs <<<"$flags"
# Its directories, resolved, must be the root's.
resolved=""
for flag in "${cflags[@]}" "${libs[@]}"; do
  case $flag in
    -I* | -L*) resolved+=" ${flag:0:2}$(realpath -m "${flag:2}")" ;;
    *) resolved+=" $flag" ;;
  esac
done
[ "$resolved" = " -I$root/usr/include -L$root$libdir -lbaton" ] ||
  fail "pkg-config --cflags --libs baton says '${cflags[*]} ${libs[*]}', not the root's directories"
compile=(cc -std=c11 -Wall -Wextra -Werror -O2 "${cflags[@]}" -MMD -MF "$example/allreduce.d"
  -o "$example/allreduce" "$example/allreduce.c" "${libs[@]}" "-Wl,--trace")
for tree in "$source_dir" "$build_dir"; do
  for path in "$tree" "$(realpath "$tree")"; do
    [[ "${compile[*]}" != *"$path"* ]] || fail "the compile line names $path: ${compile[*]}"
  done
done
echo "${compile[*]}"
trace=$(env -u CPATH -u C_INCLUDE_PATH -u LIBRARY_PATH -u GCC_EXEC_PREFIX "${compile[@]}" 2>&1) ||
  fail "compiling examples/allreduce.c against the root's libbaton:"$'\n'"$trace"
# What it read and linked: the root's headers and libbaton.so, nothing of the host's or the tree's.
read_files=$(sed 's/\\$//; s/^[^:]*://' "$example/allreduce.d" | xargs -n 1 realpath)
others=$(grep -vxF "$example/allreduce.c" <<<"$read_files" | grep -v "^$root/usr/include/baton/" || true)
[ -z "$others" ] || fail "allreduce.c read headers outside the root's /usr/include/baton: $others"
grep -qxF "$root/usr/include/baton/baton.h" <<<"$read_files" ||
  fail "allreduce.c did not read $root/usr/include/baton/baton.h"
linked=$(grep '/libbaton\.so' <<<"$trace" || true)
[ "$(realpath "$linked")" = "$root$library" ] ||
  fail "the link took libbaton from '$linked', not $root$libdir/libbaton.so"
# In the root, the loader finds it by its SONAME in the default directories (/lib is /usr/lib).
loads=$(in_root ldd /.example/allreduce | awk '$1 == "libbaton.so.0" { print $3 }')
[ -n "$loads" ] && [ "$(in_root readlink -f "$loads")" = "$library" ] ||
  fail "in the root, allreduce loads libbaton.so.0 from '$loads', not $library"

# Two ranks of it run an all-reduce inside the root, through the installed batond (loopback
# only, ports it picks, its socket in a scratch directory of the root's /tmp).
pid=""
rank_pids=()
# Running, and not a zombie waiting for this shell's wait.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
# stop_process PID SECONDS: SIGTERM, then SIGKILL if PID still runs SECONDS later (returns 1).
# Leaves PID's exit status in stopped_status.
stop_process() {
  local stopped=0 deadline=$((SECONDS + $2))
  kill -TERM "$1" 2>/dev/null || true
  while alive "$1" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  if alive "$1"; then
    echo "pid $1 ($(tr '\0' ' ' < "/proc/$1/cmdline" | cut -c1-80)) still running $2 s after SIGTERM: killed" >&2
    kill -KILL "$1" 2>/dev/null || true
    stopped=1
  fi
  stopped_status=0
  wait "$1" 2>/dev/null || stopped_status=$?
  return $stopped
}
# Stops the ranks, then batond; cleanup_root runs it on every exit, so it always returns 0.
# Says in daemon_stop_error what went wrong: batond needed SIGKILL, or did not exit 0.
daemon_stop_error=""
stop_daemon() {
  local rank_pid daemon=$pid
  for rank_pid in "${rank_pids[@]}"; do stop_process "$rank_pid" 5 || true; done
  rank_pids=()
  [ -n "$daemon" ] || return 0
  pid=""
  if ! stop_process "$daemon" 20; then
    daemon_stop_error="batond still ran 20 s after SIGTERM"
  elif [ "$stopped_status" -ne 0 ]; then
    daemon_stop_error="batond exited $stopped_status after SIGTERM"
  fi
  return 0
}
# batond reads /proc; a rank's buffers, shared with the daemon, live in /dev/shm.
mount_in "$root" proc proc /proc
mount_in "$root" tmpfs tmpfs /dev/shm
run=$(mktemp -d "$root/tmp/batond.XXXXXX")
run=${run#"$root"}
socket=$run/batond.sock
node="deb-install-test"
chroot "$root" /usr/bin/batond --socket="$socket" --ready-file="$run/ready" \
  --peer-listen=127.0.0.1:0 --data-listen=127.0.0.1:0 --metrics-listen=127.0.0.1:0 \
  --advertise-host=127.0.0.1 --node-name="$node" --probe-interval=0 \
  > "$example/batond.log" 2>&1 &
pid=$!
daemon_failed() { cat "$example/batond.log" >&2; fail "$@"; }
# The ready file names its addresses once it serves.
deadline=$((SECONDS + 30))
until [ -s "$root$run/ready" ]; do
  alive "$pid" || daemon_failed "batond exited before it was ready"
  [ $SECONDS -lt $deadline ] || daemon_failed "batond not ready in 30 s"
  sleep 0.1
done
for key in peer_address data_address metrics_address; do
  address=$(sed -n "s/^$key=//p" "$root$run/ready")
  [[ $address == 127.0.0.1:[1-9]* ]] || daemon_failed "batond's $key is '$address', not on loopback"
done
status=$(in_root /usr/bin/baton status --socket "$socket" 2>&1) ||
  daemon_failed "baton status --socket $socket: $status"
grep -q "^node $node (batond $version, pid " <<<"$status" ||
  daemon_failed "baton status does not show node $node, batond $version: $status"
id=$(in_root /usr/bin/baton comm-id --socket "$socket" 2>&1) || daemon_failed "baton comm-id: $id"
[[ $id == "$(sed -n 's/^peer_address=//p' "$root$run/ready")/"* ]] ||
  daemon_failed "baton comm-id printed '$id', not an id rooted at this batond"

# An odd count a little over one 1 MiB pipeline chunk: two chunks, the second partial.
world=2
count=262147
for ((rank = 0; rank < world; rank++)); do
  chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin BATON_SOCKET="$socket" \
    BATON_COMM_ID="$id" BATON_RANK=$rank BATON_WORLD_SIZE=$world BATON_COUNT=$count \
    /.example/allreduce > "$example/rank$rank.out" 2> "$example/rank$rank.err" &
  rank_pids+=($!)
done
failed=""
deadline=$((SECONDS + 60))
for ((rank = 0; rank < world; rank++)); do
  while alive "${rank_pids[rank]}" && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
  code=0
  if alive "${rank_pids[rank]}"; then
    stop_process "${rank_pids[rank]}" 5 || true
    code="still running after 60 s: stopped"
  else
    wait "${rank_pids[rank]}" || code=$?
  fi
  out=$(cat "$example/rank$rank.out")
  expected="rank $rank/$world on node $node: all_reduce of $count float32 OK"
  if [ "$code" != 0 ]; then
    failed+=$'\n'"rank $rank exited $code: $(cat "$example/rank$rank.err")"
  elif [ "$out" != "$expected" ]; then
    failed+=$'\n'"rank $rank printed '$out', not '$expected'"
  else
    echo "$out"
  fi
done
rank_pids=()
[ -z "$failed" ] || daemon_failed "the example's ranks in the root:$failed"

# SIGTERM stops batond; then nothing may run in the root, nor stay mounted in it.
stop_start=$SECONDS
stop_daemon
[ -z "$daemon_stop_error" ] || daemon_failed "$daemon_stop_error"
echo "batond stopped $((SECONDS - stop_start)) s after SIGTERM"
[ ! -e "$root$socket" ] || fail "batond left its socket $socket"
real_root=$(realpath "$root")
left=""
for proc in /proc/[0-9]*; do
  [ "$(readlink "$proc/root" 2>/dev/null)" = "$real_root" ] && left+=" ${proc#/proc/}"
done
[ -z "$left" ] || fail "processes still running in the root:$left"
for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
  umount "${mounted[i]}" || fail "umount ${mounted[i]}"
done
mounted=()
! grep -F " $real_root/" /proc/mounts || fail "still mounted in the root (above)"
rm -r "$example" "$root$run"

# Purge: nothing dpkg listed for the package stays, but directories other packages share.
listed=$(in_root dpkg -L baton)
in_root dpkg --purge baton >/dev/null || fail "dpkg --purge baton failed"
in_root dpkg-query -W baton >/dev/null 2>&1 && fail "baton still known to dpkg after purge"
left=()
shared=()
while IFS= read -r path; do
  if [ -z "$path" ] || [ "$path" = /. ]; then continue; fi
  [ -e "$root$path" ] || [ -L "$root$path" ] || continue
  if [ -d "$root$path" ] && in_root dpkg-query -S "$path" >/dev/null 2>&1; then
    shared+=("$path")  # another package's directory too
  else
    left+=("$path")
  fi
done <<<"$listed"
[ ${#left[@]} -eq 0 ] || fail "left after dpkg --purge baton: ${left[*]}"
echo "dpkg listed $(wc -l <<<"$listed") paths; after purge only shared directories remain: ${shared[*]}"
echo "deb_install_test: passed ($((SECONDS - start)) s after the image build)"
