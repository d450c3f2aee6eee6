#!/usr/bin/env bash
# Baton as a user gets it: `cmake --install` into a throwaway prefix, examples/ copied outside the
# source tree and built against that prefix only - with CMake (find_package(Baton)) and with make
# (pkg-config baton) - then 4 ranks of each example (2 on each of 2 daemons started with the
# installed `baton local up`) run an all-reduce, with LD_LIBRARY_PATH the installed lib dir only.
#
# Usage: installed_consumer_test.sh <build dir> <source dir>
# Needs the build's `all` target built (batond, baton, libbaton.so, man pages). Loopback only.
set -euo pipefail

build=$(cd "${1:?usage: installed_consumer_test.sh <build dir> <source dir>}" && pwd -P)
source=$(cd "${2:?usage: installed_consumer_test.sh <build dir> <source dir>}" && pwd -P)
for tool in cmake make pkg-config cc c++ readelf; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done

# Nothing from the caller's environment may point a compiler or the loader anywhere else.
unset CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH PKG_CONFIG_PATH \
  CMAKE_PREFIX_PATH CFLAGS CXXFLAGS LDFLAGS BATON_SOCKET BATON_ALGO

tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-consumer-XXXXXX")
tmp=$(cd "$tmp" && pwd -P)
case $tmp/ in
  "$source"/* | "$build"/*) echo "FAIL: temp dir $tmp is inside the source or build tree" >&2
    exit 1 ;;
esac
prefix=$tmp/prefix
cluster_dir=$tmp/cluster
cluster_up=0
rank_pids=()

cleanup() {
  local status=$?
  for pid in "${rank_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [[ $cluster_up -eq 1 ]]; then
    BATON_LOCAL_DIR=$cluster_dir "$prefix/bin/baton" local down >/dev/null 2>&1 || true
  fi
  if [[ $status -eq 0 ]]; then
    rm -rf "$tmp"
  else
    echo "installed_consumer_test: FAILED; files kept in $tmp" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

step "install $build into $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install"; }
# Where GNUInstallDirs put the library directory (lib, or lib/<multiarch> for prefix /usr).
pc=$(find "$prefix" -name baton.pc -path '*/pkgconfig/*' | head -n 1)
[[ -n $pc ]] || fail "no baton.pc installed under $prefix"
pkgconfig_dir=$(dirname "$pc")
libdir=$(dirname "$pkgconfig_dir")
[[ -e $libdir/libbaton.so.0 ]] || fail "no libbaton.so.0 beside $pkgconfig_dir"
[[ -x $prefix/bin/baton && -x $prefix/bin/batond ]] || fail "baton and batond not installed"
for header in baton/baton.h baton/baton.hpp baton/version.h; do
  [[ -f $prefix/include/$header ]] || fail "<$header> not installed"
done
# The installed files must not point back into the tree they were built from.
if leaks=$(grep -rlE "$source|$build" "$prefix/include" "$pkgconfig_dir" "$libdir/cmake" 2>/dev/null); then
  fail "installed files name the source or build tree: $leaks"
fi
if readelf -d "$libdir/libbaton.so.0" | grep -qE 'RPATH|RUNPATH'; then
  fail "the installed libbaton.so.0 keeps a run path: $(readelf -d "$libdir/libbaton.so.0" | grep -E 'RPATH|RUNPATH')"
fi
echo "libdir $libdir"

examples=$tmp/examples
cp -r "$source/examples" "$examples"
rm -rf "$examples/build" "$examples/allreduce" "$examples/allreduce_cpp"

# Fails if a compile or link line in log $1 names the source or build tree.
check_lines() {
  local log=$1 what=$2
  if grep -E "$source|$build" "$log" >&2; then
    fail "$what: a compile or link line names the source or build tree (above)"
  fi
  grep -qE -- "-I ?$prefix/|-isystem $prefix/|-I$pkgconfig_dir/" "$log" ||
    fail "$what: no include path into the installed prefix in $log"
}

step "build the examples with CMake (find_package(Baton))"
cmake -S "$examples" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake-configure.log" 2>&1 ||
  { cat "$tmp/cmake-configure.log" >&2; fail "configuring examples/ with CMake"; }
baton_dir=$(sed -n 's/^Baton_DIR:PATH=//p' "$tmp/cmake-build/CMakeCache.txt")
[[ $baton_dir == "$prefix"/* ]] || fail "find_package(Baton) found $baton_dir, not the prefix"
cmake --build "$tmp/cmake-build" --verbose >"$tmp/cmake-build.log" 2>&1 ||
  { cat "$tmp/cmake-build.log" >&2; fail "building examples/ with CMake"; }
check_lines "$tmp/cmake-build.log" "CMake"
grep -E -- ' -o (CMakeFiles/|allreduce)' "$tmp/cmake-build.log"

step "build the examples with make (pkg-config baton)"
PKG_CONFIG_PATH=$pkgconfig_dir make -C "$examples" >"$tmp/make.log" 2>&1 ||
  { cat "$tmp/make.log" >&2; fail "building examples/ with make"; }
check_lines "$tmp/make.log" "make"
cat "$tmp/make.log"

for binary in "$tmp/cmake-build/allreduce" "$tmp/cmake-build/allreduce_cpp" \
              "$examples/allreduce" "$examples/allreduce_cpp"; do
  resolved=$(LD_LIBRARY_PATH=$libdir ldd "$binary" | awk '/libbaton\.so/ {print $3}')
  [[ $resolved == "$libdir/libbaton.so.0" ]] ||
    fail "$binary loads libbaton from '$resolved', not $libdir"
done

step "start 2 daemons with the installed baton local up"
mkdir -p "$cluster_dir"
cluster_up=1
BATON_LOCAL_DIR=$cluster_dir "$prefix/bin/baton" local up --nodes 2 ||
  fail "baton local up --nodes 2"
status_text=$(BATON_LOCAL_DIR=$cluster_dir "$prefix/bin/baton" local status) ||
  { echo "$status_text" >&2; fail "baton local status: not every daemon is running"; }
echo "$status_text"
mapfile -t sockets < <(awk '$4 == "running" && $5 == "socket" {print $6}' <<<"$status_text")
[[ ${#sockets[@]} -eq 2 ]] || fail "expected 2 running daemons' sockets, got ${#sockets[@]}"
for address in $(awk '{for (i = 1; i <= NF; ++i) if ($i ~ /^(peer|data|metrics)=/) print $i}' \
                   "$cluster_dir/cluster.txt"); do
  [[ ${address#*=} == 127.0.0.1:* ]] || fail "a daemon listens on ${address}, not loopback"
done

# Runs 4 ranks of example $1 (ranks 0, 1 on daemon 0; 2, 3 on daemon 1) on a new communicator;
# fails unless every rank printed its OK line and exited 0.
run_ranks() {
  local name=$1 binary=$2 world=4 count=$3
  local id
  id=$("$prefix/bin/baton" comm-id --socket "${sockets[0]}") || fail "baton comm-id"
  step "$name: 4 ranks, communicator $id"
  rank_pids=()
  for rank in 0 1 2 3; do
    env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$libdir" BATON_SOCKET="${sockets[rank / 2]}" \
      BATON_COMM_ID="$id" BATON_RANK=$rank BATON_WORLD_SIZE=$world BATON_COUNT="$count" \
      timeout 120 "$binary" >"$tmp/$name.$rank.out" 2>"$tmp/$name.$rank.err" &
    rank_pids+=($!)
  done
  local failed=0
  for rank in 0 1 2 3; do
    local code=0
    wait "${rank_pids[rank]}" || code=$?
    cat "$tmp/$name.$rank.out"
    local expected="rank $rank/$world on node node-$((rank / 2)): all_reduce of $count float32 OK"
    if [[ $code -ne 0 ]]; then
      echo "FAIL: $name rank $rank exited $code: $(cat "$tmp/$name.$rank.err")" >&2
      failed=1
    elif [[ $(cat "$tmp/$name.$rank.out") != "$expected" ]]; then
      echo "FAIL: $name rank $rank printed '$(cat "$tmp/$name.$rank.out")', not '$expected'" >&2
      failed=1
    fi
  done
  rank_pids=()
  [[ $failed -eq 0 ]] || fail "$name: not every rank succeeded"
}

# The Makefile's binaries carry no run path: only LD_LIBRARY_PATH finds libbaton.
run_ranks allreduce_c "$examples/allreduce" 1048576
run_ranks allreduce_cpp "$examples/allreduce_cpp" 1048576
# CMake's carry the prefix as their run path; odd count, to cover a partial chunk.
run_ranks allreduce_c_cmake "$tmp/cmake-build/allreduce" 100003
run_ranks allreduce_cpp_cmake "$tmp/cmake-build/allreduce_cpp" 100003

step "stop the cluster"
BATON_LOCAL_DIR=$cluster_dir "$prefix/bin/baton" local down
cluster_up=0
echo "installed_consumer_test: OK (CMake and pkg-config builds, C and C++, 4 ranks on 2 daemons)"
