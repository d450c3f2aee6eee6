#!/usr/bin/env python3
"""torch.distributed through the `baton` backend against `gloo`, in one run with the same ranks.

Three commands (run with --help for each):

  local     one node: `baton local up --nodes 1` (one daemon), R rank processes on it; Gloo over
            loopback. float32 all_reduce and all_gather_into_tensor across sizes.
  netns     N hosts in network namespaces (scripts/netns_cluster.sh, one batond per host), one
            rank process per host started inside its namespace with that host's daemon; Gloo
            bound to the host's 198.18 address. Same sweep. Needs root.
  overhead  one daemon, a world of one rank: an 8-byte dist.all_reduce against the same call one
            layer down at a time (ProcessGroup, the backend object, the `baton` extension, the C
            API through ctypes) and `baton bench` (the C++ client); what Python/c10d adds.

Every rank runs both backends in the same processes: the default group is "baton", a second
group over the same ranks is "gloo" (dist.new_group). First every op and backend runs untimed at
one element (--sweep-warmup). Then for each size the backends take turns (the order alternates
from size to size); per backend and size, like nccl-tests: warm-up iterations, then timed ones,
each preceded by an untimed barrier of the backend being measured (--no-barrier: back to back);
a rank times its own call; an iteration's time is its slowest rank's; the reported time is the
median over iterations. -n is an upper bound: where a call is slow, as many iterations as fit
--budget seconds (at least --min-iters). busbw (nccl-tests): all_reduce size / time * 2(n-1)/n;
all_gather size / time * (n-1)/n, where size is the gathered (output) tensor's bytes. After the
timed iterations one more call with known inputs is checked element by element (#wrong). The
rank processes' CPU time per timed iteration (all threads, barrier included, summed over ranks)
is printed for the smallest size.

More variants (--backends): "baton-shm" is baton with tensors from baton.torch.zeros, in memory
shared with the daemon, so libbaton stages nothing (plain tensors are copied into and out of the
daemon's memory on every call); "baton-capi" is not torch.distributed but libbaton's C API
through ctypes from the same processes, on a communicator of its own, with plain tensors. After
the sweep `baton bench` (the C++ client, shared buffers) runs the smallest and largest size on
the same daemons and ranks per daemon (--cxx-sizes).

Uses only loopback (local, overhead) and the 198.18.0.0/15 addresses netns_cluster.sh creates.
The rank processes need torch and the built `baton` package: by default they run with the
project's venv (scripts/setup_python.sh) and PYTHONPATH=<checkout>/build/python, e.g.

  scripts/bench_torch.py local --backends baton,baton-shm,gloo
  scripts/bench_torch.py netns --hosts 4 --rate 1gbit      # as root
  scripts/bench_torch.py overhead --pin
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch_rank import log, overhead_main, rank_main  # noqa: E402  (the rank side)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ("all_reduce", "all_gather")
BACKENDS = ("baton", "baton-shm", "baton-capi", "gloo")
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def sizes_of(lo: int, hi: int, factor: int) -> list:
    """lo, lo*f, lo*f^2, ... up to hi, and hi itself if the steps miss it."""
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    if out[-1] != hi:
        out.append(hi)
    return out


def default_python() -> str:
    """The project's venv (scripts/setup_python.sh, cmake/PythonEnv.cmake), else this one."""
    venv = os.environ.get("BATON_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "baton", "venv")
    python = os.path.join(venv, "bin", "python")
    return python if os.path.exists(python) else sys.executable


# ---- the rank side ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(a, extra: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (a.pythonpath, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def run_ranks(a, work: str, placements: list, init: str, sizes: list) -> dict:
    """Starts one rank process per entry of placements ((command prefix, env) each), waits for
    all of them, returns rank 0's results."""
    out = os.path.join(work, "results.json")
    procs, logs = [], []
    for r, (prefix, env) in enumerate(placements):
        cmd = prefix + [a.python, os.path.abspath(__file__), "_rank", "--rank", str(r),
                        "--world", str(len(placements)), "--init", init, "--out", out,
                        "--sizes", ",".join(map(str, sizes)), "--ops", a.ops,
                        "--backends", a.backends, "-n", str(a.iters), "-w", str(a.warmup),
                        "--min-iters", str(a.min_iters), "--budget", str(a.budget),
                        "--libbaton", a.libbaton, "--sweep-warmup", str(a.sweep_warmup),
                        "--op-timeout", str(a.op_timeout)]
        if not a.barrier:
            cmd.append("--no-barrier")
        path = os.path.join(work, f"rank{r}.log")
        logs.append(path)
        f = open(path, "w")
        # rank 0's progress lines go to the terminal too (tail of its log at the end)
        procs.append((subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                       start_new_session=True), f))
    deadline = time.monotonic() + a.timeout
    failed = []
    try:
        for r, (p, f) in enumerate(procs):
            left = max(1.0, deadline - time.monotonic())
            try:
                if p.wait(timeout=left) != 0:
                    failed.append(r)
            except subprocess.TimeoutExpired:
                failed.append(r)
                break
    finally:
        for p, f in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            f.close()
    if failed:
        for path in logs:
            with open(path, errors="replace") as f:
                sys.stderr.write(f"---- {path} (tail) ----\n{f.read()[-3000:]}\n")
        raise SystemExit(f"bench_torch: rank(s) {failed} failed or timed out; logs in {work}")
    with open(out) as f:
        return json.load(f)


def cxx_bench(a, cluster_args: list, op: str, size: int, per_daemon: int,
              barrier: bool = True, prefix: tuple = (), iters: int = 0, warmup: int = 0) -> float:
    """`baton bench` (the C++ client, shared-memory buffers) of one op at one size on the same
    daemons, -n iters (default -n) after -w warmup, each iteration after a barrier unless
    `barrier` is false; the slowest rank's median, in seconds."""
    cmd = [*prefix, os.path.join(a.bin, "baton"), "bench", *cluster_args, "--ranks-per-daemon",
           str(per_daemon), "-o", op, "-b", str(size), "-e", str(size), "-n",
           str(iters or a.iters), "-w", str(warmup or a.warmup), "--median"] + (
               ["--barrier"] if barrier and getattr(a, "barrier", True) else [])
    text = subprocess.run(cmd, check=True, capture_output=True, text=True,
                          timeout=a.timeout).stdout
    for line in text.splitlines():
        f = line.split()
        if f and f[0].isdigit() and len(f) >= 8:
            return float(f[4]) * 1e-6
    raise SystemExit(f"bench_torch: no result in `{' '.join(cmd)}`:\n{text}")


def busbw(op: str, nbytes: int, seconds: float, n: int) -> float:
    factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
    return nbytes / seconds * factor / 1e9


def print_tables(res: dict, backends: list, header: str, cxx: dict) -> str:
    n = res["world"]
    lines = [header]
    ref = "gloo" if "gloo" in backends else None
    for op in OPS:
        rows = [r for r in res["results"] if r["op"] == op]
        if not rows:
            continue
        factor = "2(n-1)/n" if op == "all_reduce" else "(n-1)/n"
        lines.append("")
        lines.append(f"## {op} float32, n = {n} ranks; busbw = size/time * {factor}; time = "
                     "median over iterations of the slowest rank")
        head = f"{'size(B)':>10} {'count':>9}"
        for b in backends:
            head += f" {b + ' us':>13}"
        for b in backends:
            head += f" {b + ' GB/s':>14}"
        for b in backends:
            if b != ref and ref:
                head += f" {b + '/' + ref:>15}"
        head += f" {'iters':>14} {'#wrong':>6}"
        lines.append(head)
        for r in rows:
            by = r["by_backend"]
            line = f"{r['bytes']:>10} {r['elements']:>9}"
            for b in backends:
                line += f" {by[b]['median_s'] * 1e6:>13.1f}"
            for b in backends:
                line += f" {busbw(op, r['bytes'], by[b]['median_s'], n):>14.4f}"
            for b in backends:
                if b != ref and ref:
                    line += f" {by[ref]['median_s'] / by[b]['median_s']:>15.2f}"
            line += f" {'/'.join(str(by[b]['iters']) for b in backends):>14}"
            line += f" {max(by[b]['wrong'] for b in backends):>6}"
            lines.append(line)
        if ref and "baton" in backends:
            big = [r for r in rows if r["bytes"] >= 1 << 20]
            if big:
                ratios = [r["by_backend"]["gloo"]["median_s"] / r["by_backend"]["baton"]["median_s"]
                          for r in big]
                lines.append(f"# baton/gloo busbw from 1 MiB up: min {min(ratios):.2f}, "
                             f"max {max(ratios):.2f}")
            all_ratios = [r["by_backend"]["gloo"]["median_s"] / r["by_backend"]["baton"]["median_s"]
                          for r in rows]
            lines.append(f"# baton/gloo busbw over all sizes: min {min(all_ratios):.2f}")
            small = rows[0]
            lines.append(f"# smallest size ({small['bytes']} B): baton "
                         f"{small['by_backend']['baton']['median_s'] * 1e6:.1f} us, gloo "
                         f"{small['by_backend']['gloo']['median_s'] * 1e6:.1f} us")
            lines.append("# CPU time of the rank processes per timed iteration, summed over "
                         "ranks (barrier included), at the smallest size: " + ", ".join(
                             f"{b} {small['by_backend'][b]['ranks_cpu_per_iter_s'] * 1e6:.0f} us"
                             for b in backends))
        if cxx.get(op):
            lines.append("# `baton bench` (C++ client, buffers shared with the daemon) on the "
                         "same daemons and ranks, right after; its time is the slowest rank's "
                         "median")
            head = f"{'size(B)':>10} {'bench us':>10} {'bench GB/s':>10}"
            for b in ("baton", "baton-shm", "baton-capi"):
                if b in backends:
                    head += f" {b + ' us':>19} {'difference us':>14}"
            lines.append(head)
            for size, seconds in cxx[op]:
                by = next(r for r in rows if r["bytes"] == size)["by_backend"]
                line = (f"{size:>10} {seconds * 1e6:>10.1f} "
                        f"{busbw(op, size, seconds, n):>10.4f}")
                for b in ("baton", "baton-shm", "baton-capi"):
                    if b in backends:
                        line += (f" {by[b]['median_s'] * 1e6:>19.1f} "
                                 f"{(by[b]['median_s'] - seconds) * 1e6:>14.1f}")
                lines.append(line)
    return "\n".join(lines)


def run_cxx(a, res: dict, cluster_args: list, per_daemon: int) -> dict:
    """`baton bench` at the sizes of --cxx-sizes that the sweep measured, with as many
    iterations as the sweep's baton ran there."""
    cxx = {}
    for op in a.ops.split(","):
        rows = [r for r in res["results"] if r["op"] == op]
        wanted = set()
        for item in a.cxx_sizes.split(","):
            if item == "smallest":
                wanted.add(rows[0]["bytes"])
            elif item == "largest":
                wanted.add(rows[-1]["bytes"])
            elif item and item != "none":
                wanted.add(parse_bytes(item))
        cxx[op] = []
        for r in rows:
            if r["bytes"] in wanted:
                first = next(iter(r["by_backend"].values()))
                cxx[op].append((r["bytes"], cxx_bench(
                    a, cluster_args, op, r["bytes"], per_daemon, iters=first["iters"],
                    warmup=first["warmup"])))
    return cxx


def load_avg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine_line() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "")
    except OSError:
        pass
    return (f"# machine: {os.cpu_count()} CPUs ({model}), {os.uname().release}, "
            f"load average {load_avg()}")


def commit_line() -> str:
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "?"
    return f"# commit {rev}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"


def finish(a, text: str, res: dict, work: str) -> None:
    print(text, flush=True)
    with open(os.path.join(work, "table.txt"), "w") as f:
        f.write(text + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


def workdir(a, name: str) -> tuple:
    if a.dir:
        os.makedirs(a.dir, exist_ok=True)
        return a.dir, False
    return tempfile.mkdtemp(prefix=f"baton-bench-torch-{name}-"), True


def cmd_local(a) -> None:
    work, _ = workdir(a, "local")
    cluster = os.path.join(work, "cluster")
    baton = os.path.join(a.bin, "baton")
    subprocess.run([baton, "local", "down", f"--dir={cluster}"], capture_output=True)
    up = [baton, "local", "up", "--nodes", "1", f"--dir={cluster}"]
    if a.daemon_args:
        up.append(f"--daemon_args={a.daemon_args}")
    subprocess.run(up, check=True, stdout=subprocess.DEVNULL)
    try:
        sock = os.path.join(cluster, "node-0.sock")
        env = child_env(a, {"BATON_SOCKET": sock, "GLOO_SOCKET_IFNAME": "lo"})
        sizes = sizes_of(a.min_bytes, a.max_bytes, a.factor)
        load0 = machine_line()
        start = time.monotonic()
        res = run_ranks(a, work, [([], env)] * a.ranks, f"tcp://127.0.0.1:{free_port()}", sizes)
        took = time.monotonic() - start
        cxx = run_cxx(a, res, ["--sockets", sock], a.ranks)
        header = "\n".join([
            f"# setup (a): one node, 1 batond (`baton local up --nodes 1`), {a.ranks} rank "
            "processes on it; gloo over loopback (GLOO_SOCKET_IFNAME=lo)",
            commit_line(), f"{load0} at the start, {load_avg()} at the end",
            f"# -n {a.iters} -w {a.warmup} --min-iters {a.min_iters} --budget {a.budget} s"
            f"{'' if a.barrier else ', --no-barrier (iterations back to back)'}; "
            f"sweep took {took:.0f} s; torch {res.get('torch')}"])
        finish(a, print_tables(res, a.backends.split(","), header, cxx), res, work)
    finally:
        subprocess.run([baton, "local", "down", f"--dir={cluster}"], stdout=subprocess.DEVNULL)


def read_hosts(path: str) -> list:
    hosts = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            hosts.append(dict(kv.split("=", 1) for kv in line.split()))
    hosts.sort(key=lambda h: int(h.get("index", 0)))  # cluster.txt has no index: kept in order
    return hosts


def cmd_netns(a) -> None:
    work, _ = workdir(a, "netns")
    cluster = os.path.join(work, "cluster")
    script = os.path.join(ROOT, "scripts", "netns_cluster.sh")
    down = ["bash", script, "down", "--dir", cluster, "--grace", "5"]
    subprocess.run(down, capture_output=True)
    up = ["bash", script, "up", "--dir", cluster, "--hosts", str(a.hosts), "--rate", a.rate,
          "--batond", os.path.join(a.bin, "batond")]
    if a.pin:
        up.append("--pin")
    up += ["--", "--op-timeout=300s"]

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    try:
        subprocess.run(up, check=True, stdout=subprocess.DEVNULL)
        hosts = read_hosts(os.path.join(cluster, "hosts.txt"))
        for h in hosts:
            if not (h["address"].startswith("198.18.") or h["address"].startswith("198.19.")):
                raise SystemExit(f"bench_torch: host {h['index']} has address {h['address']}")
        placements = []
        for r in range(a.hosts * a.ranks_per_host):
            h = hosts[r // a.ranks_per_host]
            prefix = ["ip", "netns", "exec", h["netns"]]
            if h.get("cpu", "any") != "any":
                prefix += ["taskset", "-c", h["cpu"]]
            placements.append((prefix, child_env(a, {"BATON_SOCKET": h["socket"],
                                                     "GLOO_SOCKET_IFNAME": h["dev"]})))
        sizes = sizes_of(a.min_bytes, a.max_bytes, a.factor)
        load0 = machine_line()
        start = time.monotonic()
        res = run_ranks(a, work, placements, f"tcp://{hosts[0]['address']}:{a.port}", sizes)
        took = time.monotonic() - start
        cxx = run_cxx(a, res, ["--cluster", cluster], a.ranks_per_host)
        header = "\n".join([
            f"# setup (b): {a.hosts} hosts in network namespaces, links {a.rate} "
            f"(scripts/netns_cluster.sh{' --pin' if a.pin else ''}), one batond and "
            f"{a.ranks_per_host} rank process(es) per host in its namespace; gloo on the "
            "host's 198.18 address (GLOO_SOCKET_IFNAME=eth0)",
            commit_line(), f"{load0} at the start, {load_avg()} at the end",
            f"# -n {a.iters} -w {a.warmup} --min-iters {a.min_iters} --budget {a.budget} s"
            f"{'' if a.barrier else ', --no-barrier (iterations back to back)'}; "
            f"sweep took {took:.0f} s; torch {res.get('torch')}"])
        finish(a, print_tables(res, a.backends.split(","), header, cxx), res, work)
    finally:
        subprocess.run(down, stdout=subprocess.DEVNULL)


def cmd_overhead(a) -> None:
    work, _ = workdir(a, "overhead")
    cluster = os.path.join(work, "cluster")
    baton = os.path.join(a.bin, "baton")
    subprocess.run([baton, "local", "down", f"--dir={cluster}"], capture_output=True)
    subprocess.run([baton, "local", "up", "--nodes", "1", f"--dir={cluster}"], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        sock = os.path.join(cluster, "node-0.sock")
        a.iters = a.calls * a.rounds
        rank_cpu = []
        if a.pin:
            daemon_pid = read_hosts(os.path.join(cluster, "cluster.txt"))[0]["pid"]
            subprocess.run(["taskset", "-a", "-p", "-c", str(a.pin[1]), daemon_pid], check=True,
                           stdout=subprocess.DEVNULL)
            rank_cpu = ["taskset", "-c", str(a.pin[0])]

        def cxx():  # three runs: one is at the mercy of the machine's other work
            return [cxx_bench(a, ["--sockets", sock], "all_reduce", 8, 1, barrier=False,
                              prefix=rank_cpu) for _ in range(3)]

        before = cxx()
        out = os.path.join(work, "overhead.json")
        cmd = rank_cpu + [a.python, os.path.abspath(__file__), "_overhead", "--init",
               f"tcp://127.0.0.1:{free_port()}", "--out", out, "--calls", str(a.calls),
               "--rounds", str(a.rounds), "--warmup", str(a.warmup), "--libbaton", a.libbaton,
               "--gap-us", str(a.gap_us)]
        subprocess.run(cmd, check=True, env=child_env(a, {"BATON_SOCKET": sock,
                                                          "GLOO_SOCKET_IFNAME": "lo"}),
                       timeout=a.timeout)
        after = cxx()
        with open(out) as f:
            res = json.load(f)
        by = {v["name"]: v for v in res["variants"]}
        timer = by["empty timed call (the timer itself)"]["median_us"]
        lines = [
            "# overhead: one batond (`baton local up --nodes 1`), a world of 1 rank, float32 "
            "sum all-reduce of 8 bytes, no barrier"
            + (f"; --pin: the rank on CPU {a.pin[0]}, every batond thread on CPU {a.pin[1]}"
               if a.pin else ""),
            commit_line(), machine_line(),
            f"# {a.rounds} rounds x {a.calls} calls per variant, the variants taking turns; "
            "per-call times (perf_counter_ns around each call), medians over all calls; "
            f"torch {res['torch']}",
        ]
        lines.append(f"{'variant':<58} {'median us':>10} {'p90':>7} {'p99':>7} {'mean':>7}  "
                     "per-round medians")
        for v in res["variants"]:
            lines.append(f"{v['name']:<58} {v['median_us']:>10.2f} {v['p90_us']:>7.2f} "
                         f"{v['p99_us']:>7.2f} {v['mean_us']:>7.2f}  "
                         + " ".join(f"{x:.2f}" for x in v["round_medians_us"]))
        for when, runs in (("before", before), ("after", after)):
            lines.append(f"{'baton bench -b 8 -e 8 --ranks-per-daemon 1 (C++), ' + when:<58} "
                         f"{statistics.median(runs) * 1e6:>10.2f} {'':>23}  "
                         + " ".join(f"{x * 1e6:.2f}" for x in runs))

        def med(name):
            return by[name]["median_us"] - timer

        torch_plain = med("dist.all_reduce(t), baton")
        torch_shm = med("dist.all_reduce(t), t from baton.torch.zeros")
        ctypes_cost = med("ctypes baton_all_reduce(NULL comm): returns at once")
        c_plain = med("ctypes baton_all_reduce, plain buffer") - ctypes_cost
        c_shm = med("ctypes baton_all_reduce, baton_client_alloc buffer") - ctypes_cost
        cxx_us = statistics.median(before + after) * 1e6
        lines += [
            "",
            "# how the overhead is computed (every Python median less the timer's "
            f"{timer:.2f} us), calls back to back:",
            f"#   C API time = ctypes baton_all_reduce - ctypes call that returns at once "
            f"({ctypes_cost:.2f} us): plain buffer {c_plain:.2f} us, shared buffer {c_shm:.2f} us",
            f"#   Python/c10d overhead = dist.all_reduce - C API time, same kind of buffer: "
            f"plain {torch_plain - c_plain:.2f} us, shared {torch_shm - c_shm:.2f} us",
            f"#   against `baton bench` (C++ client, shared buffer, median of its 6 runs "
            f"{cxx_us:.2f} us): "
            f"plain {torch_plain - cxx_us:.2f} us, shared {torch_shm - cxx_us:.2f} us",
        ]
        pg_us = med("ProcessGroup.allreduce([t]).wait()")
        backend_us = med("BatonBackend.allreduce([t]).wait()")
        lines.append(f"#   by layer (plain buffer): dist.all_reduce over ProcessGroup.allreduce "
                     f"{torch_plain - pg_us:.2f} us, ProcessGroup over BatonBackend "
                     f"{pg_us - backend_us:.2f} us, BatonBackend over the C API "
                     f"{backend_us - c_plain:.2f} us")
        lines.append("#   baton Communicator.all_reduce (the package's binding) over the C API: "
                     f"{med('baton Communicator.all_reduce(t)') - c_plain:.2f} us")
        mean = {name: v["mean_us"] - by["empty timed call (the timer itself)"]["mean_us"]
                for name, v in by.items()}
        c_mean = {kind: mean[f"ctypes baton_all_reduce, {kind} buffer"]
                  - mean["ctypes baton_all_reduce(NULL comm): returns at once"]
                  for kind in ("plain", "baton_client_alloc")}
        shared_mean = mean["dist.all_reduce(t), t from baton.torch.zeros"]
        lines.append(
            "#   the same with means instead of medians: plain "
            f"{mean['dist.all_reduce(t), baton'] - c_mean['plain']:.2f} us, shared "
            f"{shared_mean - c_mean['baton_client_alloc']:.2f} us")
        if "dist.all_reduce(t), baton, after a pause" in by:
            dist_gap = med("dist.all_reduce(t), baton, after a pause")
            c_gap = med("ctypes baton_all_reduce, plain buffer, after a pause") - ctypes_cost
            lines.append(
                f"#   after a {a.gap_us:g} us pause before each call (busy, untimed): "
                f"dist.all_reduce {dist_gap:.2f} us, C API {c_gap:.2f} us, overhead "
                f"{dist_gap - c_gap:.2f} us")
        res.update({"timer_us": timer, "cxx_us": [x * 1e6 for x in before + after],
                    "c_api_plain_us": c_plain,
                    "c_api_shared_us": c_shm, "ctypes_call_us": ctypes_cost,
                    "overhead_plain_us": torch_plain - c_plain,
                    "overhead_shared_us": torch_shm - c_shm})
        finish(a, "\n".join(lines), res, work)
    finally:
        subprocess.run([baton, "local", "down", f"--dir={cluster}"], stdout=subprocess.DEVNULL)


def main() -> None:
    p = argparse.ArgumentParser(prog="bench_torch.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def common(q, sweep=True):
        q.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                       help="baton, batond (default: build/bin of this checkout)")
        q.add_argument("--python", default=default_python(),
                       help="interpreter of the rank processes, with torch (default: "
                       "$BATON_VENV/bin/python, i.e. ~/.cache/baton/venv/bin/python, if it "
                       "exists, else this one)")
        q.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"),
                       help="prepended to the ranks' PYTHONPATH (default: build/python)")
        q.add_argument("--dir", help="working directory: cluster, rank logs, results.json, "
                       "table.txt (default: a new one under $TMPDIR, kept)")
        q.add_argument("--json", help="also write the raw results here")
        q.add_argument("--libbaton", default=os.path.join(ROOT, "build", "lib", "libbaton.so.0"),
                       help="the C library for ctypes (default build/lib/libbaton.so.0)")
        q.add_argument("--timeout", type=float, default=1800,
                       help="limit of the whole measurement in seconds (default 1800)")
        if not sweep:
            return
        q.add_argument("-b", dest="min_bytes", type=parse_bytes, default=8,
                       help="smallest size in bytes (K, M suffixes; default 8)")
        q.add_argument("-e", dest="max_bytes", type=parse_bytes, default=64 << 20,
                       help="largest size (default 64M; always measured)")
        q.add_argument("-f", dest="factor", type=int, default=4, choices=(2, 4),
                       help="size factor (default 4)")
        q.add_argument("-n", dest="iters", type=int, default=50,
                       help="timed iterations per size and backend, at most (default 50)")
        q.add_argument("-w", dest="warmup", type=int, default=5,
                       help="warm-up iterations, at most, at least 2 (default 5)")
        q.add_argument("--sweep-warmup", type=int, default=200,
                       help="untimed iterations of each op and backend at one element before "
                       "the sweep (default 200)")
        q.add_argument("--min-iters", type=int, default=5,
                       help="timed iterations at least (default 5)")
        q.add_argument("--budget", type=float, default=2.0,
                       help="seconds of timed iterations per size and backend: fewer than -n "
                       "(not fewer than --min-iters) where one call takes long; warm-up gets a "
                       "quarter of it (default 2)")
        q.add_argument("--ops", default="all_reduce,all_gather",
                       help="all_reduce (dist.all_reduce), all_gather "
                       "(dist.all_gather_into_tensor); default both")
        q.add_argument("--backends", default="baton,gloo",
                       help="comma-separated: baton, gloo; baton-shm (baton with tensors from "
                       "baton.torch.zeros, in memory shared with the daemon: no staging copies); "
                       "baton-capi (not torch.distributed: libbaton's C API through ctypes from "
                       "the same processes, plain tensors, its own barrier); default baton,gloo")
        q.add_argument("--op-timeout", type=float, default=300,
                       help="process groups' timeout in seconds (default 300)")
        q.add_argument("--no-barrier", dest="barrier", action="store_false",
                       help="no barrier before each timed iteration: back to back, as in a "
                       "training step (`baton bench` then runs without --barrier too)")
        q.add_argument("--cxx-sizes", default="smallest,largest",
                       help="sizes (bytes, or smallest, largest) at which `baton bench` runs "
                       "afterwards on the same daemons, with the sweep's iteration counts; "
                       "none: skip (default smallest,largest)")

    q = sub.add_parser("local", help="setup (a): one daemon, R ranks on it",
                       description="Setup (a): `baton local up --nodes 1`, --ranks rank "
                       "processes on that one daemon; Gloo over loopback.")
    common(q)
    q.add_argument("--ranks", type=int, default=4, help="rank processes (default 4)")
    q.add_argument("--daemon-args", default="", help="batond flags for `baton local up`")

    q = sub.add_parser("netns", help="setup (b): hosts in network namespaces (root)",
                       description="Setup (b): scripts/netns_cluster.sh up --hosts N --rate R "
                       "(one batond per host), --ranks-per-host rank processes per host inside "
                       "its namespace with BATON_SOCKET of its daemon, Gloo on its 198.18 "
                       "address; the cluster is torn down on exit.")
    common(q)
    q.add_argument("--hosts", type=int, default=4, help="hosts (default 4)")
    q.add_argument("--rate", default="1gbit", help="link rate (tc syntax) or none; default 1gbit")
    q.add_argument("--ranks-per-host", type=int, default=1, help="default 1")
    q.add_argument("--pin", action="store_true",
                   help="netns_cluster.sh --pin: host I's batond and ranks on one CPU")
    q.add_argument("--port", type=int, default=29500,
                   help="rendezvous port on host 0's address (default 29500)")

    q = sub.add_parser("overhead", help="Python/c10d cost per call over the C API",
                       description="One daemon, one rank: 8-byte all-reduces through "
                       "dist.all_reduce, ProcessGroup, the backend object, baton.Communicator, "
                       "the C API (ctypes) and `baton bench` (C++); prints each median and the "
                       "differences.")
    common(q, sweep=False)
    q.add_argument("--calls", type=int, default=5000, help="calls per variant and round "
                   "(default 5000)")
    q.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    q.add_argument("--warmup", type=int, default=500, help="warm-up calls per variant")
    q.add_argument("--gap-us", type=float, default=200,
                   help="pause before each call of the 'after a pause' variants (default 200; "
                   "0: no such variants)")
    q.add_argument("--pin", nargs="?", const="0,1", default=None,
                   type=lambda v: tuple(int(x) for x in v.split(",")),
                   help="RANK_CPU,DAEMON_CPU (default 0,1): the measuring process (and `baton "
                   "bench`) on one CPU, every thread of the daemon on another, so that they "
                   "never wait for each other's spins")

    # Internal: the rank processes.
    q = sub.add_parser("_rank")
    for name in ("--rank", "--world"):
        q.add_argument(name, type=int, required=True)
    for name in ("--init", "--out", "--sizes", "--ops", "--backends"):
        q.add_argument(name, required=True)
    q.add_argument("-n", dest="iters", type=int, required=True)
    q.add_argument("-w", dest="warmup", type=int, required=True)
    q.add_argument("--min-iters", type=int, required=True)
    q.add_argument("--budget", type=float, required=True)
    q.add_argument("--op-timeout", type=float, required=True)
    q.add_argument("--no-barrier", dest="barrier", action="store_false")
    q.add_argument("--libbaton", required=True)
    q.add_argument("--sweep-warmup", type=int, required=True)
    q = sub.add_parser("_overhead")
    for name in ("--init", "--out", "--libbaton"):
        q.add_argument(name, required=True)
    for name in ("--calls", "--rounds", "--warmup"):
        q.add_argument(name, type=int, required=True)
    q.add_argument("--gap-us", type=float, required=True)

    a = p.parse_args()
    if a.command == "_rank":
        return rank_main(a)
    if a.command == "_overhead":
        return overhead_main(a)
    for b in getattr(a, "backends", "baton").split(","):
        if b not in BACKENDS:
            p.error(f"unknown backend {b} ({', '.join(BACKENDS)})")
    for o in getattr(a, "ops", "all_reduce").split(","):
        if o not in OPS:
            p.error(f"unknown op {o} ({', '.join(OPS)})")
    if not os.path.exists(os.path.join(a.bin, "baton")):
        p.error(f"no {a.bin}/baton (--bin)")
    {"local": cmd_local, "netns": cmd_netns, "overhead": cmd_overhead}[a.command](a)


if __name__ == "__main__":
    main()
