#!/usr/bin/env bash
# Link-health test: 4 hosts in network namespaces (scripts/netns_cluster.sh), every link shaped
# to 1 Gbit/s except host3's, shaped to 100 Mbit/s. Each batond probes the others in the
# background (--probe-peers, no job needed). Checks, as an operator would with `baton links`:
#   - on host0..host2 the link to host3 is flagged for bandwidth, and no other link is flagged
#     for anything (the link to host3 may also be flagged for RTT: probes queue in its tbf);
#   - host3 flags nothing (all of its links are equally slow: flags compare a daemon's links
#     with each other);
#   - /metrics says the same (baton_link_flagged), and the daemon logged it;
#   - once host3's link is back at 1 Gbit/s the flags clear.
# Exits 77 (skipped) where network namespaces cannot be created (not root, no veth/bridge/tbf).
# Usage: link_health_test.sh NETNS_CLUSTER_SH BATOND BATON
set -euo pipefail
netns_cluster=$1
batond=$2
baton=$3
readonly hosts=4 slow=3

# shellcheck source=tests/cluster/cluster_test_lib.sh
source "$(dirname "$0")/cluster_test_lib.sh"
start_cluster_dir

BATON_NETNS_UNAVAILABLE_STATUS=77 bash "$netns_cluster" up --dir "$dir" --hosts $hosts \
  --rate 1gbit --host-rate $slow=100mbit --batond "$batond" -- \
  --probe-interval=500ms --probe-peers={peers} --log-level=info

# Prints "<host> <peer> <flagged_bandwidth> <flagged_rtt> <bandwidth MB/s> <rtt us>" per link of
# every host, from `baton links --json`.
links() {
  for ((i = 0; i < hosts; i++)); do
    "$baton" links --json --socket "$dir/host$i.sock" | python3 -c '
import json, sys
status = json.load(sys.stdin)
for link in status.get("links", []):
    print(status["node_name"], link["peer_node"] or link["peer_address"],
          int(link["flagged_bandwidth"]), int(link["flagged_rtt"]),
          "%.1f" % (link["bandwidth_bytes_per_second"] / 1e6), "%.0f" % (link["rtt_seconds"] * 1e6))
'
  done
}

# The expected verdict: the links host0..2 -> host3 flagged for bandwidth, no other link flagged.
expected_flags() {
  awk -v slow="host$slow" '
    { n++; if ($5 == 0) unmeasured++ }
    ($3 == 1 || $4 == 1) && !($2 == slow && $1 != slow) { wrong = wrong " " $1 "->" $2 }
    $2 == slow && $1 != slow && $3 == 1 { flagged++ }
    END { exit !(n == 12 && !unmeasured && wrong == "" && flagged == 3) }'
}

no_flags() {
  awk '{ n++ } $3 == 1 || $4 == 1 { bad++ } END { exit !(n == 12 && !bad) }'
}

# Polls the links table into $table until VERDICT accepts it; fails with MESSAGE after 90 s.
wait_for_table() {
  local verdict=$1 message=$2 deadline=$((SECONDS + 90))
  while :; do
    table=$(links)
    if "$verdict" <<<"$table"; then return; fi
    [ $SECONDS -lt $deadline ] || {
      echo "$table"
      fail "$message within 90 s"
    }
    sleep 1
  done
}

# Wait for the verdict (a window of probes takes about 5 rounds of 0.5 s).
wait_for_table expected_flags "the link to host$slow was not flagged (only)"
echo "host peer flagged_bandwidth flagged_rtt bandwidth_MB/s rtt_us"
echo "$table"
echo "flagged: exactly the links to host$slow"

# The table view and the metric agree; the daemon said so in its log.
"$baton" links --socket "$dir/host0.sock"
"$baton" links --socket "$dir/host0.sock" | grep -q "^host$slow .*FLAGGED:bandwidth" ||
  fail "baton links on host0 does not show host$slow as FLAGGED"
metrics=$(bash "$netns_cluster" exec --dir "$dir" 0 -- python3 -c '
import urllib.request
print(urllib.request.urlopen("http://198.18.0.10:9460/metrics", timeout=10).read().decode())')
grep -q "^baton_link_flagged{local_node=\"host0\",peer_node=\"host$slow\",transport=\"tcp\",reason=\"bandwidth\"} 1" <<<"$metrics" ||
  fail "host0's /metrics does not flag host$slow"
others=$(grep '^baton_link_flagged{.*} 1$' <<<"$metrics" | grep -v "peer_node=\"host$slow\"" || true)
[ -z "$others" ] || fail "host0's /metrics flags links other than the one to host$slow:"$'\n'"$others"
grep -q "link to host$slow .*flagged: bandwidth" "$dir/host0.log" ||
  fail "host0's log does not say that the link to host$slow was flagged"

# Back to full rate: the flags clear once the probe window has only fast measurements.
bash "$netns_cluster" shape --dir "$dir" $slow 1gbit
wait_for_table no_flags "flags did not clear after restoring host$slow's link"
echo "after restoring host$slow's link: no link flagged"
grep -q "link to host$slow .*no longer flagged for bandwidth" "$dir/host0.log" ||
  fail "host0's log does not say that the flag cleared"
echo "PASS"
