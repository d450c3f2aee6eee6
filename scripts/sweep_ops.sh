#!/usr/bin/env bash
# Runs every collective over a range of sizes on a cluster of hosts in network namespaces
# (scripts/netns_cluster.sh) with `baton bench`, prints one table of times per size and
# collective, and flags sizes that look like stalls: an operation slower than the same one at
# twice the size, or one that takes more than 3 times as long as at half the size. Needs root.
# Run with --help for usage.
set -euo pipefail

kRoot=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly kRoot
readonly kAllOps="all_reduce,reduce_scatter,all_gather,broadcast,reduce,all_to_all"
# shellcheck source=scripts/size_tables.awk.sh
source "$kRoot/scripts/size_tables.awk.sh"

usage() {
  cat <<EOF
Usage: $(basename "$0") [options]

Starts a cluster of N hosts in network namespaces (netns_cluster.sh up, one batond per host),
runs \`baton bench -o OP --median --barrier\` for each collective from -b to -e bytes (factor 2)
with K ranks per host, and prints the slowest rank's median time (us) per size and collective.
Marks after a time:
  <   slower than the same collective at twice the size, by more than 25 %
  !   more than 3 times the time at half the size
  W   wrong elements in the check (bench -c 1)
These are hints, not verdicts: on a busy machine small sizes vary by more than 25 % between
neighbouring sizes, and a rate-limited link makes time grow with size from some size on (at
1 Gbit/s, once a size no longer fits tbf's burst). A stall (a 40 ms delayed-ACK trap, a reader
that waits out a timer) shows as a mark that repeats from run to run. Exits 0 unless the cluster
or a bench fails; --strict exits 3 when any size is marked.

Options:
  --hosts N            hosts (namespaces), default 4
  --rate RATE          link rate each way (tc syntax: 1gbit, 100mbit) or none; default 1gbit
  --ranks-per-host K   ranks per host, default 1
  --pin                each host's batond on one CPU of its own (netns_cluster.sh up --pin)
  --ops LIST           comma-separated subset of $kAllOps (default all)
  -b, -e BYTES         smallest and largest size (default 1K, 16M)
  -n ITERS, -w WARMUP  timed and warm-up iterations per size (default 20, 10; with few warm-up
                       iterations the smallest size also times a fresh communicator's first
                       operations, and is often marked)
  --dir DIR            working directory (default /tmp/baton-sweep)
  --bin DIR            baton and batond (default: build/bin of this checkout)
  --strict             exit 3 if any size is marked
Example:
  scripts/sweep_ops.sh --hosts 4 --rate 1gbit --ranks-per-host 2 -b 1K -e 4M
EOF
}

hosts=4 rate=1gbit per_host=1 pin=0 ops=$kAllOps min_bytes=1K max_bytes=16M iters=20 warmup=10
dir=/tmp/baton-sweep bin="$kRoot/build/bin" strict=0
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --ranks-per-host) per_host=$2; shift 2 ;;
    --pin) pin=1; shift ;;
    --ops) ops=$2; shift 2 ;;
    -b) min_bytes=$2; shift 2 ;;
    -e) max_bytes=$2; shift 2 ;;
    -n) iters=$2; shift 2 ;;
    -w) warmup=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --bin) bin=$(cd "$2" && pwd); shift 2 ;;
    --strict) strict=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "sweep_ops: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
[[ $hosts =~ ^[1-9][0-9]*$ && $per_host =~ ^[1-9][0-9]*$ ]] || {
  echo "sweep_ops: --hosts and --ranks-per-host must be positive integers" >&2
  exit 2
}
IFS=, read -r -a op_list <<<"$ops"
for op in "${op_list[@]}"; do
  [[ ",$kAllOps," == *",$op,"* ]] || { echo "sweep_ops: unknown collective $op" >&2; exit 2; }
done
for b in "$bin/baton" "$bin/batond"; do
  [ -x "$b" ] || { echo "sweep_ops: no $b (--bin DIR, or scripts/build.sh)" >&2; exit 1; }
done

mkdir -p "$dir/raw"
cluster="$dir/cluster"
cleanup() { bash "$kRoot/scripts/netns_cluster.sh" down --dir "$cluster" --grace 5 >&2 || true; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
pin_flag=()
[ "$pin" -eq 0 ] || pin_flag=(--pin)
bash "$kRoot/scripts/netns_cluster.sh" down --dir "$cluster" --grace 5 >/dev/null 2>&1 || true
bash "$kRoot/scripts/netns_cluster.sh" up --dir "$cluster" --hosts "$hosts" --rate "$rate" \
  "${pin_flag[@]}" --batond "$bin/batond" -- --op-timeout=120s >/dev/null

# Each bench's rows become "bytes time_us wrong" in DIR/raw/OP.tsv.
for op in "${op_list[@]}"; do
  if ! "$bin/baton" bench --cluster "$cluster" --ranks-per-daemon "$per_host" -o "$op" \
    -b "$min_bytes" -e "$max_bytes" -f 2 -n "$iters" -w "$warmup" -c 1 --median --barrier \
    >"$dir/raw/$op.out" 2>&1; then
    echo "sweep_ops: baton bench -o $op failed; see $dir/raw/$op.out" >&2
    exit 1
  fi
  awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $1, $5, $8 }' "$dir/raw/$op.out" >"$dir/raw/$op.tsv"
done

{
  echo "# baton bench per collective: $hosts hosts x $per_host ranks, links $rate$([ "$pin" -eq 0 ] || echo ', --pin');" \
    "$iters iterations after $warmup warm-up, each after a barrier; slowest rank's median (us);" \
    "$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# < slower than at twice the size by > 25 %; ! > 3 x the time at half the size; W wrong elements"
  awk -v ops="$ops" -v dir="$dir/raw" "$kReadSizeTablesAwk"'
    BEGIN {
      n = read_size_tables(ops, dir)
      for (i = 1; i <= n; i++) op[i] = col[i]
      printf "%12s", "size(B)"
      for (i = 1; i <= n; i++) printf " %15s", op[i]
      print ""
      marks = 0
      for (k = 1; k <= ns; k++) {
        s = order[k]; printf "%12d", s
        for (i = 1; i <= n; i++) {
          if (!((i, s) in t)) { printf " %15s", "-"; continue }
          m = ""
          if ((i, 2 * s) in t && t[i, s] > 1.25 * t[i, 2 * s]) m = m "<"
          if (s % 2 == 0 && (i, s / 2) in t && t[i, s] > 3 * t[i, s / 2]) m = m "!"
          if (bad[i, s]) m = m "W"
          if (m != "") marks++
          printf " %12.1f%-3s", t[i, s], m
        }
        print ""
      }
      print "# marked sizes: " marks
    }'
} | tee "$dir/table.txt"
marked=$(awk '/^# marked sizes: / { print $4 }' "$dir/table.txt")
[ "$strict" -eq 1 ] && [ "${marked:-0}" -gt 0 ] && exit 3
exit 0
