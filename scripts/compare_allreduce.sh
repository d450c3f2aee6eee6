#!/usr/bin/env bash
# Measures the same float32 sum all-reduce with Baton, Gloo (allreduce_ring_chunked and
# allreduce_halving_doubling over its TCP transport) and Open MPI (MPI_Allreduce) in one run, on
# one cluster of hosts in network namespaces (scripts/netns_cluster.sh), and prints one table of
# busbw per size. Only 198.18.0.0/15 (the benchmark range) and loopback are used. Needs root, and
# the peer libraries of scripts/setup_bench.sh. Run with --help for usage.
set -euo pipefail

kRoot=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly kRoot
readonly kAllLibs="baton,gloo_ring_chunked,gloo_halving_doubling,mpi"
# shellcheck source=scripts/size_tables.awk.sh
source "$kRoot/scripts/size_tables.awk.sh"

usage() {
  cat <<EOF
Usage: $(basename "$0") [options]

Builds a cluster of N hosts in network namespaces (scripts/netns_cluster.sh up, one batond per
host), then measures, back to back on that cluster, the same all-reduce (float32, sum) with:
  baton                  baton bench --cluster, --ranks-per-daemon K (K ranks per host, reduced
                         in the daemon's memory, one daemon per host on the links)
  gloo_ring_chunked      tests/benchmarks/peers/gloo_allreduce_bench, N*K ranks, each in its
  gloo_halving_doubling  host's namespace, Gloo TCP bound to the host's 198.18 address
  mpi                    tests/benchmarks/peers/mpi_allreduce_bench under Open MPI: one orted per
                         namespace (mpirun in host 0's namespace; an rsh agent that enters the
                         namespace), the TCP BTL on 198.18.0.0/15 across hosts and, with K > 1,
                         the shared-memory BTL (vader) between a host's ranks; with --hosts 1
                         only vader
and prints one table: size, busbw (GB/s) of each, and Baton / the best of the others; then the
times. busbw = size / time * 2(n-1)/n with n the number of ranks (nccl-tests). Every library
starts each iteration after an untimed barrier. The time of Gloo and MPI is the median over
iterations of the slowest rank's time; Baton's is the slowest rank's median (baton bench
--median --barrier, client/cli/bench.cc). Tears the cluster down on exit; raw outputs stay in DIR.

Options:
  --hosts N            hosts (namespaces), default 4
  --rate RATE          link rate each way (tc syntax: 1gbit, 100mbit) or none; default 1gbit
  --ranks-per-host K   ranks per host, default 1 (Gloo and MPI run N*K flat ranks)
  -b, -e, -f BYTES     smallest, largest size and factor (default 8, 64M, 2)
  -n ITERS, -w WARMUP  timed and warm-up iterations per size (default 10, 3)
  --libs LIST          comma-separated subset of $kAllLibs (default all)
  --dir DIR            working directory (default /tmp/baton-compare); raw outputs in DIR/raw
  --bin DIR            baton and batond (default: build/bin of this checkout)
  --peer-build DIR     build directory of the peer benchmarks (default: build-peers); they are
                       configured and built there (only these two targets) when missing
  --timeout S          limit of each library's run in seconds (default 900)
  --mpi-args "ARGS"    extra mpirun arguments (word-split), e.g. "--mca coll_tuned_use_dynamic_rules 1
                       --mca coll_tuned_allreduce_algorithm 4" to force Open MPI's ring
  --pin                each host's processes on one CPU of their own (netns_cluster.sh up --pin:
                       host I on the (I mod C)-th CPU of C): its batond, its Gloo ranks and its
                       MPI orted with the ranks it starts, as if each host had CPUs of its own.
                       Baton's ranks run in the root namespace and are not pinned
  --mpi-busy-poll      let MPI ranks spin while waiting (Open MPI's default); by default they
                       yield (mpi_yield_when_idle=1), which this script needs on machines with
                       fewer cores than ranks + daemons
Example:
  scripts/setup_bench.sh
  scripts/compare_allreduce.sh --hosts 4 --rate 1gbit -b 8 -e 64M -n 10 -w 3
EOF
}

hosts=4 rate=1gbit per_host=1 min_bytes=8 max_bytes=64M factor=2 iters=10 warmup=3
libs=$kAllLibs dir=/tmp/baton-compare bin="$kRoot/build/bin" peer_build="$kRoot/build-peers"
run_timeout=900 mpi_yield=1 mpi_args="" pin=0
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --ranks-per-host) per_host=$2; shift 2 ;;
    -b) min_bytes=$2; shift 2 ;;
    -e) max_bytes=$2; shift 2 ;;
    -f) factor=$2; shift 2 ;;
    -n) iters=$2; shift 2 ;;
    -w) warmup=$2; shift 2 ;;
    --libs) libs=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --bin) bin=$(cd "$2" && pwd); shift 2 ;;
    --peer-build) peer_build=$2; shift 2 ;;
    --timeout) run_timeout=$2; shift 2 ;;
    --mpi-args) mpi_args=$2; shift 2 ;;
    --mpi-busy-poll) mpi_yield=0; shift ;;
    --pin) pin=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "compare_allreduce: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
[[ $hosts =~ ^[1-9][0-9]*$ && $per_host =~ ^[1-9][0-9]*$ ]] || {
  echo "compare_allreduce: --hosts and --ranks-per-host must be positive integers" >&2
  exit 2
}
readonly world=$((hosts * per_host))
IFS=, read -r -a lib_list <<<"$libs"
for lib in "${lib_list[@]}"; do
  [[ ",$kAllLibs," == *",$lib,"* ]] || { echo "compare_allreduce: unknown library $lib" >&2; exit 2; }
done

log() { echo "compare_allreduce: $*" >&2; }

# --- the peer benchmarks ------------------------------------------------------------------
mkdir -p "$dir/raw"
peer_bin="$peer_build/bin"
needs_peers=false
[[ ",$libs," == *",gloo_"* || ",$libs," == *",mpi,"* ]] && needs_peers=true
if $needs_peers && { [ ! -x "$peer_bin/gloo_allreduce_bench" ] ||
  [ ! -x "$peer_bin/mpi_allreduce_bench" ]; }; then
  log "building the peer benchmarks in $peer_build (scripts/setup_bench.sh installs Gloo, MPI)"
  [ -f "$peer_build/CMakeCache.txt" ] ||
    cmake -S "$kRoot" -B "$peer_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DBATON_PEER_BENCHMARKS=ON >"$dir/raw/cmake.log" 2>&1 ||
    { cat "$dir/raw/cmake.log" >&2; exit 1; }
  cmake --build "$peer_build" --target gloo_allreduce_bench mpi_allreduce_bench >&2
fi
for b in "$bin/baton" "$bin/batond"; do
  [ -x "$b" ] || { log "no $b (--bin DIR, or scripts/build.sh)"; exit 1; }
done

# --- the cluster ----------------------------------------------------------------------------
cluster="$dir/cluster"
cleanup() {
  bash "$kRoot/scripts/netns_cluster.sh" down --dir "$cluster" --grace 5 >&2 || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
bash "$kRoot/scripts/netns_cluster.sh" down --dir "$cluster" --grace 5 >/dev/null 2>&1 || true
pin_flag=()
[ "$pin" -eq 0 ] || pin_flag=(--pin)
bash "$kRoot/scripts/netns_cluster.sh" up --dir "$cluster" --hosts "$hosts" --rate "$rate" \
  "${pin_flag[@]}" --batond "$bin/batond" -- --op-timeout=300s >&2

# host index -> namespace, address, CPU (hosts.txt: host= index= netns= address= ... cpu=)
declare -a host_ns host_addr host_cpu
while read -r line; do
  [[ $line == \#* ]] && continue
  idx=$(sed -n 's/.* index=\([0-9]*\).*/\1/p' <<<"$line")
  host_ns[idx]=$(sed -n 's/.* netns=\([^ ]*\).*/\1/p' <<<"$line")
  host_addr[idx]=$(sed -n 's/.* address=\([^ ]*\).*/\1/p' <<<"$line")
  host_cpu[idx]=$(sed -n 's/.* cpu=\([^ ]*\).*/\1/p' <<<"$line")
done <"$cluster/hosts.txt"
# The command prefix that runs a process on host H's CPU (nothing where hosts are not pinned).
on_host_cpu() {
  local cpu=${host_cpu[$1]:-any}
  [ "$cpu" = any ] || echo "taskset -c $cpu"
}
for ((h = 0; h < hosts; h++)); do
  [[ ${host_addr[h]} == 198.18.* || ${host_addr[h]} == 198.19.* ]] ||
    { log "host $h has address ${host_addr[h]}, not in 198.18.0.0/15"; exit 1; }
done

size_args=(-b "$min_bytes" -e "$max_bytes" -f "$factor" -n "$iters" -w "$warmup")

# --- one runner per library; each writes DIR/raw/<lib>.out ------------------------------------
run_baton() {
  timeout "$run_timeout" "$bin/baton" bench --cluster "$cluster" --ranks-per-daemon "$per_host" \
    "${size_args[@]}" -c 1 --median --barrier
}

run_gloo() {  # ALGORITHM
  local store="$dir/raw/gloo-store-$1" pids=() r status=0
  rm -rf "$store" && mkdir -p "$store"
  for ((r = 0; r < world; r++)); do
    local h=$((r / per_host))
    # shellcheck disable=SC2046  # on_host_cpu prints a command prefix, split on purpose
    ip netns exec "${host_ns[h]}" $(on_host_cpu "$h") timeout "$run_timeout" \
      "$peer_bin/gloo_allreduce_bench" \
      --rank "$r" --size "$world" --address "${host_addr[h]}" --store "$store" \
      --algorithm "$1" --timeout-s 300 "${size_args[@]}" \
      >"$dir/raw/gloo_$1.rank$r.out" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[r]}" || status=1; done
  cat "$dir/raw/gloo_$1.rank0.out"
  [ $status -eq 0 ] || { log "gloo $1 failed; see $dir/raw/gloo_$1.rank*.out"; return 1; }
}

run_mpi() {
  local root=() extra=() mca=(--bind-to none --map-by slot --mca mpi_yield_when_idle "$mpi_yield")
  read -r -a extra <<<"$mpi_args"
  mca+=("${extra[@]}")
  [ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)
  if [ "$hosts" -eq 1 ]; then
    ip netns exec "${host_ns[0]}" timeout "$run_timeout" mpirun "${root[@]}" -np "$world" \
      --oversubscribe "${mca[@]}" --mca btl vader,self \
      "$peer_bin/mpi_allreduce_bench" "${size_args[@]}"
    return
  fi
  # Open MPI's rsh launcher with an "ssh" that enters a host's namespace (with a hostname of
  # its own, so that each orted is a node of its own): an orted per namespace, ranks mapped to
  # hosts in order, PMIx between each orted and its ranks on the namespace's loopback.
  local agent="$dir/raw/mpi_netns_agent.sh" hostfile="$dir/raw/mpi_hostfile" h
  {
    echo '#!/bin/bash'
    echo '# Generated by compare_allreduce.sh: Open MPI plm_rsh_agent entering host<i>'\''s netns.'
    echo 'host=$1; shift'
    echo 'case $host in'
    for ((h = 0; h < hosts; h++)); do
      echo "  host$h) ns=${host_ns[h]}; cpu=\"$(on_host_cpu "$h")\" ;;"
    done
    echo '  *) echo "no namespace for $host" >&2; exit 1 ;;'
    echo 'esac'
    echo 'exec ip netns exec "$ns" $cpu unshare --uts /bin/sh -c "hostname $host; $*"'
  } >"$agent"
  chmod +x "$agent"
  for ((h = 0; h < hosts; h++)); do echo "host$h slots=$per_host"; done >"$hostfile"
  local btl=tcp,self
  [ "$per_host" -eq 1 ] || btl=tcp,vader,self
  ip netns exec "${host_ns[0]}" unshare --uts /bin/sh -c 'hostname launcher && exec "$@"' _ \
    timeout "$run_timeout" mpirun "${root[@]}" -np "$world" --hostfile "$hostfile" \
    --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 --mca routed direct \
    --mca oob_tcp_if_include 198.18.0.0/15 --mca btl "$btl" \
    --mca btl_tcp_if_include 198.18.0.0/15 "${mca[@]}" \
    "$peer_bin/mpi_allreduce_bench" "${size_args[@]}" 2> >(grep -v 'setpgid' >&2)
}

declare -A seconds_of
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
for lib in "${lib_list[@]}"; do
  log "running $lib ($world ranks on $hosts hosts, rate $rate)"
  start=$(date +%s.%N)
  status=0
  case $lib in
    baton) run_baton >"$dir/raw/$lib.out" || status=$? ;;
    gloo_ring_chunked) run_gloo ring_chunked >"$dir/raw/$lib.out" || status=$? ;;
    gloo_halving_doubling) run_gloo halving_doubling >"$dir/raw/$lib.out" || status=$? ;;
    mpi) run_mpi >"$dir/raw/$lib.out" || status=$? ;;
  esac
  seconds_of[$lib]=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  [ $status -eq 0 ] || log "$lib exited with status $status (partial results are kept)"
  log "$lib took ${seconds_of[$lib]} s"
done

# --- the table --------------------------------------------------------------------------------
# Each raw output becomes "bytes seconds wrong" lines: Baton's table rows (time in us), the peers'
# RESULT lines (median seconds).
for lib in "${lib_list[@]}"; do
  if [ "$lib" = baton ]; then
    awk '$1 ~ /^[0-9]+$/ && NF >= 8 { printf "%s %.9f %s\n", $1, $5 / 1e6, $8 }' \
      "$dir/raw/$lib.out"
  else
    awk '$1 == "RESULT" { print $2, $3, $4 }' "$dir/raw/$lib.out"
  fi >"$dir/raw/$lib.tsv"
done

{
  echo "# all-reduce float32 sum: $hosts hosts x $per_host ranks = $world ranks, links $rate;" \
    "$iters iterations after $warmup warm-up per size; $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# machine: $(nproc) CPUs ($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1))," \
    "$(uname -r), load average $load_at_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
  [ -z "$mpi_args" ] || echo "# mpirun extra arguments: $mpi_args"
  [ "$pin" -eq 0 ] || echo "# --pin: host i's batond, Gloo ranks and MPI orted + ranks on CPU" \
    "$(for ((h = 0; h < hosts; h++)); do printf '%s ' "${host_cpu[h]}"; done)(host 0..$((hosts - 1))); Baton's ranks not pinned"
  echo "# run time (s): $(for l in "${lib_list[@]}"; do printf '%s %s  ' "$l" "${seconds_of[$l]}"; done)"
  echo "# busbw = size/time * 2(n-1)/n, n = $world; every iteration after an untimed barrier; baton:" \
    "median of the slowest rank; gloo, mpi: median over iterations of the slowest rank; ! = wrong elements"
  awk -v libs="$libs" -v dir="$dir/raw" -v n="$world" "$kReadSizeTablesAwk"'
    BEGIN {
      nl = read_size_tables(libs, dir)
      for (i = 1; i <= nl; i++) lib[i] = col[i]
      factor = n > 1 ? 2 * (n - 1) / n : 0
      printf "%12s", "size(B)"
      for (i = 1; i <= nl; i++) printf " %22s", lib[i]
      print "   baton/best-other"
      for (k = 1; k <= ns; k++) {
        s = order[k]; printf "%12d", s; best = 0; mine = 0
        for (i = 1; i <= nl; i++) {
          if ((i, s) in t && t[i, s] > 0) {
            bw = s / t[i, s] / 1e9 * factor
            printf " %21.4f%s", bw, bad[i, s] ? "!" : " "
            if (lib[i] == "baton") mine = bw; else if (bw > best) best = bw
          } else {
            printf " %22s", "-"
          }
        }
        if (mine > 0 && best > 0) printf "   %8.2f", mine / best
        print ""
      }
      print ""
      printf "%12s", "time (us)"
      for (i = 1; i <= nl; i++) printf " %22s", lib[i]
      print ""
      for (k = 1; k <= ns; k++) {
        s = order[k]; printf "%12d", s
        for (i = 1; i <= nl; i++) {
          if ((i, s) in t) printf " %22.1f", t[i, s] * 1e6; else printf " %22s", "-"
        }
        print ""
      }
    }'
} | tee "$dir/table.txt"
