#!/usr/bin/env bash
# A Baton cluster of N hosts in Linux network namespaces on this machine, for benchmarks and
# cluster tests. Each host is a namespace with one veth link to a bridge (the "switch") in a
# namespace of its own, optionally rate-limited with tbf in both directions, running one batond.
# Only 198.18.0.0/15 (the benchmark range) and loopback are used; the root namespace's addresses,
# routes and links are never touched. Run with --help for usage.
set -euo pipefail

kScriptDir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly kScriptDir
readonly kMaxHosts=1000
readonly kPeerPort=7460 kDataPort=7461 kMetricsPort=9460
# tbf: queue up to 20 ms at the link rate (the switch port's buffer) and let bursts of 2 ms at the
# rate, at least 64 KiB (a TSO segment), through at line speed. Measured on veth: one TCP flow
# reaches 95.4-95.6 % of the rate at 100 Mbit/s, 1 Gbit/s and 10 Gbit/s with MTU 1500, which is
# the Ethernet + IP + TCP header ceiling (1448 / 1514 bytes = 95.6 %). Bursts of 1 ms lose 0.5-2 %
# when the sender is descheduled on a busy machine; 32 KiB loses 10 %.
readonly kTbfLatency=20ms kTbfMinBurst=65536 kTbfBurstUs=2000

usage() {
  cat <<EOF
Usage: $(basename "$0") COMMAND [options]

Runs a Baton cluster of N hosts, each in its own network namespace with one batond, linked
through a bridge in a "switch" namespace; each host's link can be shaped with tbf. Addresses are
198.18.0.(10+i)/15 (the benchmark range). Needs root.

Commands:
  up --dir DIR --hosts N [options] [-- BATOND_ARGS...]
      Creates the namespaces and links, starts one batond per host (node name host<i>, client
      socket DIR/host<i>.sock, log DIR/host<i>.log; peer, data and metrics on ports
      $kPeerPort, $kDataPort and $kMetricsPort of the host's address) and waits until each is ready. Writes
      DIR/cluster.txt (the format of \`baton local\`, so \`baton bench --cluster DIR\` and
      \`baton status --socket DIR/host0.sock\` work from the root namespace) and DIR/hosts.txt
      (one line per host: host, index, netns, address, dev, rate, rate_bits, socket, cpu).
      On failure everything it created is removed again.
        --rate RATE          rate of every host's link in both directions, as tc writes it
                             (100mbit, 1gbit, 10gbit, 500kbit, 125mbps = bytes/s), or "none" for
                             an unshaped link (default: 1gbit)
        --host-rate I=RATE   rate of host I's link instead (repeatable)
        --mtu BYTES          MTU of every link (default: 1500)
        --prefix NAME        namespace name prefix (default: bt<hash of DIR>); namespaces are
                             NAME-sw and NAME-h<i>
        --batond PATH        batond binary (default: build/bin/batond of this checkout, else PATH)
        --start-timeout S    seconds to wait for the daemons to become ready (default: 30)
        --pin                run host I's batond (and what \`exec\` runs in host I) on one CPU,
                             the (I mod C)-th of the C CPUs this script may use, as if each host
                             had CPUs of its own (hosts.txt: cpu=N; without --pin: cpu=any)
        -- BATOND_ARGS...    extra flags for every batond, e.g. -- --op-timeout=10s; in them
                             {index} is the host's index, {address} its address and {peers}
                             the other hosts' peer addresses (A:$kPeerPort,B:$kPeerPort,...)

  down --dir DIR [--grace S]
      Stops every process in the cluster's namespaces (SIGTERM, then SIGKILL after S seconds,
      default 10), deletes the namespaces (and with them the veths and the bridge) and removes
      cluster.txt and hosts.txt; logs are kept. Idempotent; safe after a partial \`up\`.

  exec --dir DIR I -- CMD [ARGS...]
      Runs CMD in host I's namespace, with BATON_SOCKET set to host I's daemon socket (on host
      I's CPU if the cluster was started with --pin).

  shape --dir DIR I RATE
      Changes host I's link rate (both directions) on the fly; RATE "none" removes shaping.

  measure --dir DIR FROM TO [--seconds S]
      Measures one TCP flow's goodput from host FROM to host TO for S seconds (default 3, the
      first 0.5 s not counted) and prints it with its ratio to the link rate. Needs python3.

  check
      Exits 0 if network namespaces, veths, a bridge and tbf can be created here, else prints
      why and exits 77.

Environment:
  BATON_NETNS_UNAVAILABLE_STATUS  exit status of \`up\` when namespaces cannot be created here
                                  (not root, no netns/veth/bridge/tbf support); default 1.
                                  Tests set it to 77 (skipped).

Example:
  scripts/netns_cluster.sh up --dir /tmp/nc --hosts 3 --rate 1gbit
  build/bin/baton bench --cluster /tmp/nc -b 8 -e 64M
  scripts/netns_cluster.sh shape --dir /tmp/nc 2 100mbit
  scripts/netns_cluster.sh exec --dir /tmp/nc 0 -- tc -s qdisc show dev eth0
  scripts/netns_cluster.sh down --dir /tmp/nc
EOF
}

log() { echo "netns_cluster: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
# Exits with BATON_NETNS_UNAVAILABLE_STATUS (default 1): this machine cannot run the cluster.
unavailable() {
  log "cannot create network namespaces here: $*"
  exit "${BATON_NETNS_UNAVAILABLE_STATUS:-1}"
}

# --- names and addresses -------------------------------------------------------------------

canonical_dir() { realpath -m -- "$1"; }
# True while process $1 runs: an exited one that nobody has reaped yet (a zombie, state Z in
# /proc/PID/stat) does not count, and holds nothing any more.
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

default_prefix() {
  local hash
  hash=$(printf '%s' "$1" | sha1sum)
  echo "bt${hash:0:8}"
}

# The prefix `up` recorded in DIR, else the default for DIR.
prefix_of() {
  local dir=$1
  if [ -s "$dir/netns_prefix" ]; then
    cat "$dir/netns_prefix"
  else
    default_prefix "$dir"
  fi
}

switch_ns() { echo "$1-sw"; }
host_ns() { echo "$1-h$2"; }

# Host i's address: 198.18.0.(10+i), continuing into 198.18.1.x and beyond for large clusters.
host_address() {
  local j=$((10 + $1))
  echo "198.18.$((j / 256)).$((j % 256))"
}

# The namespaces of the cluster with this prefix that exist now.
cluster_namespaces() {
  local prefix=$1
  ip netns list 2>/dev/null | awk -v p="$prefix" '
    { name = $1 }
    name == p "-sw" || substr(name, 1, length(p) + 2) == p "-h" && substr(name, length(p) + 3) ~ /^[0-9]+$/ {
      print name
    }'
}

# --- rates ---------------------------------------------------------------------------------

# Prints the rate in bits/s (0 for "none"); fails on anything else. Units as tc's: bit, kbit,
# mbit, gbit, tbit (powers of 1000) and bps, kbps, mbps, gbps, tbps (bytes per second).
rate_bits() {
  local rate=${1,,}
  [ "$rate" = none ] && {
    echo 0
    return
  }
  awk -v r="$rate" 'BEGIN {
    if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit 1
    value = substr(r, 1, RLENGTH); unit = substr(r, RLENGTH + 1)
    if (unit ~ /^[kmgt]?bit$/) scale = 1
    else if (unit ~ /^[kmgt]?bps$/) scale = 8
    else exit 1
    p = substr(unit, 1, 1)
    if (p == "k") scale *= 1e3; else if (p == "m") scale *= 1e6
    else if (p == "g") scale *= 1e9; else if (p == "t") scale *= 1e12
    bits = value * scale
    if (bits < 8000) exit 1
    printf "%.0f\n", bits
  }' || return 1
}

check_rate() {
  rate_bits "$1" >/dev/null || die "bad rate '$1' (use e.g. 100mbit, 1gbit, 10gbit or none)"
}

# Shapes the egress of DEV in namespace NS at RATE, or removes the shaping for "none".
shape_dev() {
  local ns=$1 dev=$2 rate=$3 bits burst
  bits=$(rate_bits "$rate")
  if [ "$bits" -eq 0 ]; then
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    return 0
  fi
  burst=$((bits * kTbfBurstUs / 8000000))
  [ "$burst" -ge "$kTbfMinBurst" ] || burst=$kTbfMinBurst
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "${bits}bit" burst "$burst" \
    latency "$kTbfLatency"
}

# Host i's link in both directions: its own egress (host -> switch) and the switch port's egress
# (switch -> host).
shape_host() {
  local prefix=$1 i=$2 rate=$3
  shape_dev "$(host_ns "$prefix" "$i")" eth0 "$rate" &&
    shape_dev "$(switch_ns "$prefix")" "p$i" "$rate"
}

# --- up ------------------------------------------------------------------------------------

# The CPUs this process may run on, one number each (Cpus_allowed_list: "0-3,8,10-11").
allowed_cpus() {
  local range c
  local -a ranges=() out=()
  IFS=, read -r -a ranges < <(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  for range in "${ranges[@]}"; do  # "N-M", or "N" (both ends the same)
    for ((c = ${range%-*}; c <= ${range#*-}; c++)); do out+=("$c"); done
  done
  echo "${out[*]}"
}

require_root() {
  [ "$(id -u)" -eq 0 ] || unavailable "needs root (network namespaces, veths and tc)"
  command -v ip >/dev/null || unavailable "ip (iproute2) is not installed"
  command -v tc >/dev/null || unavailable "tc (iproute2) is not installed"
}

new_namespace() {
  local ns=$1
  ip netns add "$ns" 2>/dev/null || return 1
  ip -n "$ns" link set lo up
  # No IPv6 on the links: no duplicate-address detection or router solicitations as noise.
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
    net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1 || true
}

# The EXIT trap of a failing `up`: removes what it created.
clean_up_failed_up() {
  local status=$?
  if [ $status -ne 0 ]; then
    log "up failed; cleaning up"
    cmd_down --dir "$failed_up_dir" --grace 3 || true
  fi
  exit $status
}

cmd_up() {
  local dir="" hosts="" rate=1gbit mtu=1500 prefix="" batond="" start_timeout=30 pin=0
  local -a host_rates=() extra=()
  while [ $# -gt 0 ]; do
    case $1 in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --host-rate) host_rates+=("${2:?--host-rate needs I=RATE}"); shift 2 ;;
    --mtu) mtu=${2:?--mtu needs a value}; shift 2 ;;
    --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
    --batond) batond=${2:?--batond needs a value}; shift 2 ;;
    --start-timeout) start_timeout=${2:?--start-timeout needs a value}; shift 2 ;;
    --pin) pin=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) usage; exit 0 ;;
    *) die "up: unknown argument '$1' (see --help)" ;;
    esac
  done
  [ -n "$dir" ] || die "up: --dir is required"
  if ! [[ $hosts =~ ^[0-9]+$ ]] || [ "$hosts" -lt 1 ] || [ "$hosts" -gt $kMaxHosts ]; then
    die "up: --hosts must be 1..$kMaxHosts"
  fi
  if ! [[ $mtu =~ ^[0-9]+$ ]] || [ "$mtu" -lt 576 ] || [ "$mtu" -gt 65535 ]; then
    die "up: bad --mtu"
  fi
  [[ $start_timeout =~ ^[0-9]+$ ]] || die "up: bad --start-timeout"
  [ -z "$prefix" ] || [[ $prefix =~ ^[A-Za-z0-9_.]{1,40}$ ]] ||
    die "up: --prefix may only hold letters, digits, '_' and '.' (at most 40)"
  check_rate "$rate"
  local -a rates=()
  local i
  for ((i = 0; i < hosts; i++)); do rates[i]=$rate; done
  local spec
  for spec in "${host_rates[@]}"; do
    [[ $spec =~ ^([0-9]+)=(.+)$ ]] || die "up: --host-rate wants I=RATE, got '$spec'"
    i=$((10#${BASH_REMATCH[1]}))
    [ "$i" -lt "$hosts" ] || die "up: --host-rate $spec: there are only $hosts hosts"
    check_rate "${BASH_REMATCH[2]}"
    rates[i]=${BASH_REMATCH[2]}
  done
  if [ -z "$batond" ]; then
    batond=$kScriptDir/../build/bin/batond
    [ -x "$batond" ] || batond=$(command -v batond) || die "up: no batond found; pass --batond"
  fi
  [ -x "$batond" ] || die "up: $batond is not executable"
  batond=$(realpath -- "$batond")
  local -a cpus=() host_cpu=()
  read -r -a cpus <<<"$(allowed_cpus)"
  [ ${#cpus[@]} -gt 0 ] || die "up: cannot read the CPUs this process may use"
  for ((i = 0; i < hosts; i++)); do
    host_cpu[i]=any
    [ "$pin" -eq 0 ] || host_cpu[i]=${cpus[i % ${#cpus[@]}]}
  done

  require_root
  mkdir -p -- "$dir"
  dir=$(canonical_dir "$dir")
  [ -n "$prefix" ] || prefix=$(default_prefix "$dir")
  local pid
  while read -r pid; do
    if running "$pid"; then
      die "up: $dir/cluster.txt lists a running daemon (pid $pid); stop that cluster first"
    fi
  done < <(sed -n 's/.* pid=\([0-9]*\) .*/\1/p' "$dir/cluster.txt" 2>/dev/null)
  if [ -n "$(cluster_namespaces "$prefix")" ]; then
    die "up: a cluster with prefix $prefix already exists (for $dir?); run \`down --dir $dir\` first"
  fi
  local socket
  socket="$dir/host$((hosts - 1)).sock"
  [ ${#socket} -lt 108 ] || die "up: $socket is too long for a unix socket; use a shorter --dir"

  local started=$SECONDS
  echo "$prefix" >"$dir/netns_prefix"
  rm -f -- "$dir/cluster.txt" "$dir/hosts.txt"
  # From here on, a failure removes everything created so far.
  failed_up_dir=$dir
  trap clean_up_failed_up EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  local sw
  sw=$(switch_ns "$prefix")
  new_namespace "$sw" || unavailable "\`ip netns add $sw\` failed"
  ip -n "$sw" link add br0 mtu "$mtu" type bridge 2>/dev/null ||
    unavailable "cannot create a bridge in a network namespace"
  ip -n "$sw" link set br0 up

  local ns addr
  for ((i = 0; i < hosts; i++)); do
    ns=$(host_ns "$prefix" "$i")
    addr=$(host_address "$i")
    new_namespace "$ns" || unavailable "\`ip netns add $ns\` failed"
    ip -n "$ns" link add eth0 mtu "$mtu" type veth peer name "p$i" mtu "$mtu" netns "$sw" \
      2>/dev/null || unavailable "cannot create a veth pair between network namespaces"
    ip -n "$ns" addr add "$addr/15" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$sw" link set "p$i" master br0 up
    shape_host "$prefix" "$i" "${rates[i]}" 2>/dev/null ||
      unavailable "cannot add a tbf qdisc (sch_tbf missing?)"
  done
  log "$hosts hosts in namespaces $prefix-h0..$((hosts - 1)), switch $sw ($((SECONDS - started)) s)"

  local -a pids=() args
  local peers arg j
  for ((i = 0; i < hosts; i++)); do
    ns=$(host_ns "$prefix" "$i")
    addr=$(host_address "$i")
    peers=""
    for ((j = 0; j < hosts; j++)); do
      [ "$j" -eq "$i" ] || peers+="${peers:+,}$(host_address "$j"):$kPeerPort"
    done
    args=()
    for arg in "${extra[@]}"; do
      arg=${arg//\{index\}/$i}
      arg=${arg//\{address\}/$addr}
      args+=("${arg//\{peers\}/$peers}")
    done
    rm -f -- "$dir/host$i.ready"
    local -a on_cpu=()
    [ "${host_cpu[i]}" = any ] || on_cpu=(taskset -c "${host_cpu[i]}")
    # setsid: the daemons outlive this script and the terminal's signals.
    ip netns exec "$ns" setsid "${on_cpu[@]}" "$batond" --node-name="host$i" --socket="$dir/host$i.sock" \
      --peer-listen="$addr:$kPeerPort" --data-listen="$addr:$kDataPort" \
      --metrics-listen="$addr:$kMetricsPort" --advertise-host="$addr" \
      --ready-file="$dir/host$i.ready" "${args[@]}" </dev/null >>"$dir/host$i.log" 2>&1 &
    pids[i]=$!
  done

  local deadline=$((SECONDS + start_timeout))
  for ((i = 0; i < hosts; i++)); do
    while [ ! -s "$dir/host$i.ready" ]; do
      if ! running "${pids[i]}"; then
        log "host$i's batond exited during start; $dir/host$i.log ends with:"
        tail -n 20 -- "$dir/host$i.log" >&2 || true
        exit 1
      fi
      if [ $SECONDS -ge $deadline ]; then
        die "host$i's batond did not become ready within ${start_timeout}s; see $dir/host$i.log"
      fi
      sleep 0.05
    done
  done

  local ready_pid node peer data metrics
  {
    echo "# baton netns cluster ($prefix): one daemon per line"
    for ((i = 0; i < hosts; i++)); do
      ready_pid=$(sed -n 's/^pid=//p' "$dir/host$i.ready")
      node=$(sed -n 's/^node_name=//p' "$dir/host$i.ready")
      peer=$(sed -n 's/^peer_address=//p' "$dir/host$i.ready")
      data=$(sed -n 's/^data_address=//p' "$dir/host$i.ready")
      metrics=$(sed -n 's/^metrics_address=//p' "$dir/host$i.ready")
      echo "node=${node:-host$i} pid=${ready_pid:-${pids[i]}} socket=$dir/host$i.sock peer=$peer" \
        "data=$data metrics=$metrics log=$dir/host$i.log"
    done
  } >"$dir/cluster.txt.tmp"
  mv -- "$dir/cluster.txt.tmp" "$dir/cluster.txt"
  {
    echo "# baton netns cluster ($prefix): one host per line; rate_bits 0 = unshaped"
    for ((i = 0; i < hosts; i++)); do
      echo "host=host$i index=$i netns=$(host_ns "$prefix" "$i") address=$(host_address "$i")" \
        "dev=eth0 rate=${rates[i],,} rate_bits=$(rate_bits "${rates[i]}") socket=$dir/host$i.sock" \
        "cpu=${host_cpu[i]}"
    done
  } >"$dir/hosts.txt.tmp"
  mv -- "$dir/hosts.txt.tmp" "$dir/hosts.txt"
  trap - EXIT INT TERM
  log "up: $hosts daemons ready in $((SECONDS - started)) s; try \`baton bench --cluster $dir\`"
  cat "$dir/hosts.txt"
}

# --- down ----------------------------------------------------------------------------------

cmd_down() {
  local dir="" grace=10
  while [ $# -gt 0 ]; do
    case $1 in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --grace) grace=${2:?--grace needs a value}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "down: unknown argument '$1' (see --help)" ;;
    esac
  done
  [ -n "$dir" ] || die "down: --dir is required"
  [[ $grace =~ ^[0-9]+$ ]] || die "down: bad --grace"
  [ "$(id -u)" -eq 0 ] || die "down: needs root"
  dir=$(canonical_dir "$dir")
  local prefix
  prefix=$(prefix_of "$dir")
  local -a namespaces pids
  mapfile -t namespaces < <(cluster_namespaces "$prefix")

  # Every process in the cluster's namespaces: the daemons and whatever `exec` started; and the
  # daemons of cluster.txt, in case their namespaces were deleted by hand.
  local ns pid
  pids=()
  for ns in "${namespaces[@]}"; do
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$ns" 2>/dev/null)
  done
  if [ -f "$dir/cluster.txt" ]; then
    while read -r pid; do
      if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--socket=$dir/host"; then
        pids+=("$pid")
      fi
    done < <(sed -n 's/.* pid=\([0-9]*\) .*/\1/p' "$dir/cluster.txt")
  fi
  if [ ${#pids[@]} -gt 0 ]; then mapfile -t pids < <(printf '%s\n' "${pids[@]}" | sort -un); fi
  if [ ${#pids[@]} -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + grace)) alive
    while :; do
      alive=()
      for pid in "${pids[@]}"; do running "$pid" && alive+=("$pid"); done
      [ ${#alive[@]} -gt 0 ] || break
      if [ $SECONDS -ge $deadline ]; then
        log "down: killing ${#alive[@]} process(es) still running after ${grace}s: ${alive[*]}"
        kill -KILL "${alive[@]}" 2>/dev/null || true
        break
      fi
      sleep 0.05
    done
  fi
  # Host namespaces first (each takes its veth pair with it), then the switch and its bridge.
  for ns in "${namespaces[@]}"; do
    [ "$ns" = "$(switch_ns "$prefix")" ] && continue
    ip netns del "$ns" 2>/dev/null || log "down: cannot delete namespace $ns"
  done
  ip netns del "$(switch_ns "$prefix")" 2>/dev/null || true
  if [ -d "$dir" ]; then
    rm -f -- "$dir/cluster.txt" "$dir/hosts.txt" "$dir/netns_prefix" "$dir"/host*.ready
  fi
  log "down: removed ${#namespaces[@]} namespace(s) with prefix $prefix, stopped ${#pids[@]} process(es)"
}

# --- exec, shape, measure ------------------------------------------------------------------

# Prints the hosts.txt field KEY of host I in DIR; fails if there is no such host.
host_field() {
  local dir=$1 i=$2 key=$3
  [ -f "$dir/hosts.txt" ] || die "no netns cluster in $dir (no hosts.txt)"
  local value
  value=$(awk -v i="$i" -v k="$key" '$0 !~ /^#/ {
      delete f
      for (n = 1; n <= NF; n++) { eq = index($n, "="); f[substr($n, 1, eq - 1)] = substr($n, eq + 1) }
      if (f["index"] == i) { print f[k]; found = 1 }
    } END { exit !found }' "$dir/hosts.txt") || die "no host $i in $dir/hosts.txt"
  echo "$value"
}

parse_dir_and_host() {
  if [ "${1:-}" != --dir ] || [ -z "${2:-}" ]; then
    die "$command: --dir DIR comes first (see --help)"
  fi
  parsed_dir=$(canonical_dir "$2")
  [[ ${3:-} =~ ^[0-9]+$ ]] || die "$command: host index expected after --dir DIR"
  parsed_host=$3
}

cmd_exec() {
  local parsed_dir parsed_host cpu
  parse_dir_and_host "$@"
  shift 3
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "exec: no command given"
  local ns socket
  ns=$(host_field "$parsed_dir" "$parsed_host" netns)
  socket=$(host_field "$parsed_dir" "$parsed_host" socket)
  cpu=$(host_field "$parsed_dir" "$parsed_host" cpu)
  [ -z "$cpu" ] || [ "$cpu" = any ] || set -- taskset -c "$cpu" "$@"
  BATON_SOCKET=$socket exec ip netns exec "$ns" "$@"
}

cmd_shape() {
  local parsed_dir parsed_host
  parse_dir_and_host "$@"
  local rate=${4:-}
  if [ -z "$rate" ] || [ $# -ne 4 ]; then die "shape: usage: shape --dir DIR I RATE"; fi
  check_rate "$rate"
  [ "$(id -u)" -eq 0 ] || die "shape: needs root"
  host_field "$parsed_dir" "$parsed_host" netns >/dev/null
  shape_host "$(prefix_of "$parsed_dir")" "$parsed_host" "$rate"
  local bits
  bits=$(rate_bits "$rate")
  awk -v i="$parsed_host" -v r="${rate,,}" -v b="$bits" '
    $0 !~ /^#/ && $2 == "index=" i {
      for (n = 1; n <= NF; n++) {
        if ($n ~ /^rate=/) $n = "rate=" r
        if ($n ~ /^rate_bits=/) $n = "rate_bits=" b
      }
    } { print }' "$parsed_dir/hosts.txt" >"$parsed_dir/hosts.txt.tmp"
  mv -- "$parsed_dir/hosts.txt.tmp" "$parsed_dir/hosts.txt"
  if [ "$bits" -eq 0 ]; then
    log "shape: host$parsed_host's link is now unshaped"
  else
    log "shape: host$parsed_host's link is now ${rate,,} in both directions"
  fi
}

cmd_measure() {
  local parsed_dir parsed_host
  parse_dir_and_host "$@"
  local from=$parsed_host to=${4:-} seconds=3
  [[ $to =~ ^[0-9]+$ ]] || die "measure: usage: measure --dir DIR FROM TO [--seconds S]"
  shift 4
  while [ $# -gt 0 ]; do
    case $1 in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    *) die "measure: unknown argument '$1'" ;;
    esac
  done
  [[ $seconds =~ ^[1-9][0-9]*$ ]] || die "measure: bad --seconds"
  [ "$from" != "$to" ] || die "measure: FROM and TO must differ"
  command -v python3 >/dev/null || die "measure: needs python3"
  local from_ns to_ns to_addr rate_from rate_to
  from_ns=$(host_field "$parsed_dir" "$from" netns)
  to_ns=$(host_field "$parsed_dir" "$to" netns)
  to_addr=$(host_field "$parsed_dir" "$to" address)
  rate_from=$(host_field "$parsed_dir" "$from" rate_bits)
  rate_to=$(host_field "$parsed_dir" "$to" rate_bits)
  local work
  work=$(mktemp -d)
  # shellcheck disable=SC2064  # expand $work now
  trap "rm -rf -- '$work'" EXIT
  ip netns exec "$to_ns" python3 "$kScriptDir/netns_goodput.py" receive "$to_addr" \
    "$work/port" $((seconds + 10)) >"$work/result" &
  local receiver=$!
  local deadline=$((SECONDS + 10))
  while [ ! -s "$work/port" ]; do
    kill -0 "$receiver" 2>/dev/null || die "measure: the receiver exited"
    [ $SECONDS -lt $deadline ] || die "measure: the receiver did not start"
    sleep 0.05
  done
  ip netns exec "$from_ns" python3 "$kScriptDir/netns_goodput.py" send "$to_addr" \
    "$(cat "$work/port")" "$seconds"
  wait "$receiver" || die "measure: the receiver failed"
  local goodput limit
  goodput=$(cat "$work/result")
  limit=$rate_from
  if [ "$limit" -eq 0 ] || { [ "$rate_to" -gt 0 ] && [ "$rate_to" -lt "$limit" ]; }; then
    limit=$rate_to
  fi
  awk -v g="$goodput" -v l="$limit" -v f="$from" -v t="$to" 'BEGIN {
    printf "host%s -> host%s: one TCP flow %.1f Mbit/s", f, t, g / 1e6
    if (l > 0) printf ", %.3f of the %.0f Mbit/s link", g / l, l / 1e6
    printf "\n"
  }'
}

# --- check ---------------------------------------------------------------------------------

cmd_check() {
  BATON_NETNS_UNAVAILABLE_STATUS=77
  require_root
  local a="btcheck$$-h0" b="btcheck$$-sw" ok=0
  if ip netns add "$a" 2>/dev/null && ip netns add "$b" 2>/dev/null; then
    if ! ip -n "$b" link add br0 type bridge 2>/dev/null; then
      ok=2
    elif ! ip -n "$a" link add eth0 type veth peer name p0 netns "$b" 2>/dev/null; then
      ok=3
    elif ! tc -n "$a" qdisc add dev eth0 root tbf rate 1gbit burst 128k latency 20ms 2>/dev/null; then
      ok=4
    fi
  else
    ok=1
  fi
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
  case $ok in
  0) echo "netns_cluster: network namespaces, veths, bridges and tbf work here" ;;
  1) unavailable "\`ip netns add\` failed" ;;
  2) unavailable "cannot create a bridge in a network namespace" ;;
  3) unavailable "cannot create a veth pair between network namespaces" ;;
  4) unavailable "cannot add a tbf qdisc (sch_tbf missing?)" ;;
  esac
}

command=${1:-}
[ $# -gt 0 ] && shift
case $command in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
exec) cmd_exec "$@" ;;
shape) cmd_shape "$@" ;;
measure) cmd_measure "$@" ;;
check) cmd_check "$@" ;;
-h | --help | help) usage ;;
"") usage >&2; exit 2 ;;
*) die "unknown command '$command' (see --help)" ;;
esac
