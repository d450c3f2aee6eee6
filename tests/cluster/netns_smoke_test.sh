#!/usr/bin/env bash
# Cluster smoke test: 3 hosts in network namespaces (scripts/netns_cluster.sh), each link shaped
# to 1 Gbit/s both ways, one batond per host; `baton bench` runs an all-reduce over 2 ranks per
# daemon from 8 B to 4 MiB. Checks that every result is right, that the 4 MiB all-reduce did not
# beat the links (a physical bound, not a timing assertion) and that its bytes crossed the veths.
# The cluster is started with --pin: each daemon, and what `exec` runs on its host, keeps to the
# CPU hosts.txt names.
# Exits 77 (skipped) where network namespaces cannot be created (not root, no veth/bridge/tbf).
# Usage: netns_smoke_test.sh NETNS_CLUSTER_SH BATOND BATON
set -euo pipefail
netns_cluster=$1
batond=$2
baton=$3
readonly hosts=3 rate=1gbit rate_bytes=125000000 ranks_per_daemon=2 iters=20 warmup=5
readonly max_bytes=$((4 << 20))

# shellcheck source=tests/cluster/cluster_test_lib.sh
source "$(dirname "$0")/cluster_test_lib.sh"
start_cluster_dir

BATON_NETNS_UNAVAILABLE_STATUS=77 bash "$netns_cluster" up --dir "$dir" --hosts $hosts \
  --rate $rate --pin --batond "$batond" -- --op-timeout=60s

# --pin: host i's daemon and `exec` in host i run on the one CPU hosts.txt gives host i, the
# (i mod C)-th of the CPUs allowed here.
allowed=()
IFS=, read -r -a ranges < <(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
for range in "${ranges[@]}"; do
  for ((c = ${range%-*}; c <= ${range#*-}; c++)); do allowed+=("$c"); done
done
for ((i = 0; i < hosts; i++)); do
  cpu=$(awk -v i=$i '$2 == "index=" i { for (f = 1; f <= NF; f++) if ($f ~ /^cpu=/) print substr($f, 5) }' \
    "$dir/hosts.txt")
  [ "$cpu" = "${allowed[i % ${#allowed[@]}]}" ] ||
    fail "hosts.txt gives host$i cpu '$cpu'; expected ${allowed[i % ${#allowed[@]}]}"
  pid=$(awk -v n="node=host$i" '$1 == n { sub(/^pid=/, "", $2); print $2 }' "$dir/cluster.txt")
  daemon_cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$pid/status")
  [ "$daemon_cpus" = "$cpu" ] || fail "host$i's batond may run on CPUs $daemon_cpus, not just $cpu"
  exec_cpus=$(bash "$netns_cluster" exec --dir "$dir" $i -- \
    sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  [ "$exec_cpus" = "$cpu" ] || fail "exec in host$i may run on CPUs $exec_cpus, not just $cpu"
done
echo "pinned: each host's daemon and exec on its own CPU"

tx_bytes() {
  bash "$netns_cluster" exec --dir "$dir" "$1" -- cat /sys/class/net/eth0/statistics/tx_bytes
}
declare -a tx_before
for ((i = 0; i < hosts; i++)); do tx_before[i]=$(tx_bytes $i); done

# With a barrier before every iteration, as compare_allreduce.sh runs it.
if ! "$baton" bench --cluster "$dir" -b 8 -e $max_bytes -n $iters -w $warmup --barrier \
  --ranks-per-daemon $ranks_per_daemon >"$dir/bench.txt" 2>&1; then
  cat "$dir/bench.txt"
  for ((i = 0; i < hosts; i++)); do tail -n 20 "$dir/host$i.log"; done
  fail "baton bench failed"
fi
cat "$dir/bench.txt"
grep -q "each iteration after a barrier" "$dir/bench.txt" || fail "bench did not say it used --barrier"

# The table's columns by their header names: size, time (us), algbw, busbw, #wrong, ...
rows=$(awk '
  /^#/ && / size / && /#wrong/ { sub(/^#/, ""); for (i = 1; i <= NF; i++) col[$i] = i; n = NF; next }
  /^#/ || NF == 0 { next }
  n && NF == n { print $col["size"], $col["time"], $col["busbw"], $col["#wrong"] }
' "$dir/bench.txt")
[ -n "$rows" ] || fail "no result rows in the bench table"
[ "$(wc -l <<<"$rows")" -eq 20 ] || fail "expected 20 sizes (8 B .. 4 MiB), got $(wc -l <<<"$rows")"
wrong=$(awk '$4 != 0' <<<"$rows")
[ -z "$wrong" ] || fail "rows with wrong elements (size time busbw #wrong):"$'\n'"$wrong"

# Each daemon must send and receive at least 2(d-1)/d of the message over its link for any
# all-reduce, so algbw * 2(d-1)/d cannot exceed the link rate; 10 % margin for tbf's burst and
# rounding. (The table's busbw counts ranks, 2(n-1)/n with n = 6, and may legitimately exceed
# the link rate by up to (5/3) / (4/3) = 1.25 when several ranks share a daemon.)
read -r size time_us busbw _ < <(awk -v s=$max_bytes '$1 == s' <<<"$rows")
[ -n "${size:-}" ] || fail "no $max_bytes-byte row"
verdict=$(awk -v s="$size" -v t="$time_us" -v d=$hosts -v r=$rate_bytes -v b="$busbw" 'BEGIN {
  link = s / (t * 1e-6) * 2 * (d - 1) / d
  printf "4 MiB all-reduce: %.1f MB/s per link (table busbw %.3f GB/s), link rate %.1f MB/s\n",
         link / 1e6, b, r / 1e6
  exit !(link <= 1.1 * r)
}') || fail "$verdict: faster than the links allow (is the link shaped?)"
echo "$verdict"

# The bytes crossed the veths: every host sent at least its own 4 MiB per timed iteration of the
# largest size alone (the rest of its data cannot reach the others any other way).
for ((i = 0; i < hosts; i++)); do
  sent=$(($(tx_bytes $i) - tx_before[i]))
  echo "host$i eth0 sent $sent bytes"
  [ "$sent" -ge $((iters * max_bytes)) ] ||
    fail "host$i's veth sent only $sent bytes; expected at least $((iters * max_bytes))"
done

# Comparing algorithms: the "auto" column names what the daemons chose, which is the tuner's
# prediction (--explain, same communicator), not whichever algorithm ran last (ring, which no
# tuner picks for 8 bytes on 3 daemons).
"$baton" bench --cluster "$dir" -b 8 -e 8 -n 3 -w 1 -c 0 --ranks-per-daemon 1 --explain \
  --algorithm auto,doubling,ring >"$dir/compare.txt" 2>&1 || {
  cat "$dir/compare.txt"
  fail "baton bench --algorithm auto,doubling,ring failed"
}
cat "$dir/compare.txt"
read -r chose predicted < <(awk '!/^#/ && NF > 3 && $1 == 8 { print $3, $NF }' "$dir/compare.txt")
[ -n "${chose:-}" ] || fail "no 8-byte row in the comparison"
[ "$chose" = "$predicted" ] ||
  fail "the auto column says $chose ran, but the tuner chose $predicted"

# In place: all_to_all within one buffer per rank (the daemons' packed path), every element
# checked.
"$baton" bench --cluster "$dir" -o all_to_all --in-place -b 6K -e 96K -f 4 -n 2 -w 1 \
  --ranks-per-daemon $ranks_per_daemon >"$dir/in_place.txt" 2>&1 || {
  cat "$dir/in_place.txt"
  fail "baton bench -o all_to_all --in-place failed"
}
cat "$dir/in_place.txt"
grep -q ", in place" "$dir/in_place.txt" || fail "bench did not say it ran in place"
grep -q "Out of bounds values : 0 OK" "$dir/in_place.txt" || fail "in-place all_to_all was wrong"
echo "PASS"
