#!/usr/bin/env bash
# The Debian package in a clean Debian 12 root: apt installs it with its Depends (the image's
# root, made by mmdebstrap from Debian's archive: package_lib.sh), its binaries run and find
# every library they need, the installed unit passes `systemd-analyze verify`, the conffile and man pages
# are where they belong, and a reinstall keeps an edited conffile; `dpkg --purge baton` then
# leaves none of the files dpkg listed for it.
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
# batond has no --version flag yet (daemon/main.cc); when it gets one, it must say VERSION.
if out=$(in_root /usr/bin/batond --version 2>&1); then
  grep -qF "$version" <<<"$out" || fail "batond --version says '$out', VERSION is $version"
else
  echo "NOTE: batond --version is not supported: $out"
fi

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
