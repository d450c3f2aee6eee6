#!/usr/bin/env python3
"""Every dashboard and alert query returns data from a real Prometheus scraping a loaded cluster.

Usage: prometheus_queries_test.py BATON BATOND

1. `BATON local up --nodes 3` starts three batond daemons on loopback in a temporary directory.
2. A Prometheus server (Debian package `prometheus`) on a free 127.0.0.1 port scrapes their
   /metrics every second as job "batond", with a `node` label from relabelling as the
   ServiceMonitor in deploy/k8s gives it, and loads the alert rules of
   deploy/k8s/prometheusrule.yaml.
3. `BATON bench` runs in a loop for a few seconds: every collective, all_reduce with the ring and
   the tree algorithm (where the bench has --op/--algorithm; an older bench runs all_reduce
   only). Then one bench rank is killed in the middle of its collectives so that the daemons
   record collectives with outcome="error".
4. Once Prometheus has scraped the daemons' final counters, every expression is evaluated with
   /api/v1/query: all panel targets and query variables of deploy/grafana/*.json (Grafana
   variables substituted: $__rate_interval -> 1m, $__range -> 5m, dashboard variables -> .*)
   and every rule expression, a top-level comparison turned into a `bool` one (a healthy
   cluster makes an alert's filter empty; the bool form shows that every series it reads
   exists). Each prints OK with its series count, EMPTY, or ERROR; for an EMPTY one, the
   metrics it reads that no daemon exports are named. Also every loaded rule must evaluate
   without error.

Fails (exit 1) listing the EMPTY and ERROR expressions; exits 77 (skip) when prometheus,
promtool or PyYAML is missing. Everything started is stopped on the way out, failure or not.
Talks to 127.0.0.1 only. Takes about 25-60 s.
"""

import calendar
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

try:
    import yaml
except ImportError:
    print(f"SKIP: PyYAML is not installed in {sys.prefix} (tests/requirements.txt; "
          "run scripts/setup_python.sh)")
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from promql_helpers import (dashboard_queries, promql_metric_names, substitute,
                            to_bool_comparison)

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODES = 3
LOAD_SECONDS = 12       # keep the bench loop going at least this long
OVERALL_SECONDS = 100   # hard limit for the whole test; every wait is bounded by it
SCRAPE_INTERVAL = "1s"
# Collectives the bench runs where it supports --op and --algorithm: (op, algorithm or "").
WORKLOAD = [("all_reduce", "ring"), ("all_reduce", "tree"), ("reduce_scatter", ""),
            ("all_gather", ""), ("broadcast", ""), ("reduce", ""), ("all_to_all", ""),
            ("barrier", "")]


class Failure(Exception):
    pass


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self, cap=None):
        left = self.end - time.monotonic()
        if left <= 0:
            raise Failure("the test ran out of time")
        return left if cap is None else min(left, cap)


def log(message):
    print(message, flush=True)


def die_with_parent():
    """preexec_fn: SIGTERM this child if the test process dies (even by SIGKILL)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode("utf-8", "replace")


def wait_for(what, predicate, deadline, cap, interval=0.25):
    """Polls predicate() until it returns something truthy; Failure after cap seconds."""
    end = time.monotonic() + deadline.left(cap)
    last_error = None
    while time.monotonic() < end:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, ValueError, urllib.error.URLError) as e:
            last_error = e
        time.sleep(interval)
    raise Failure(f"timed out after {cap:.0f} s waiting for {what}"
                  + (f" (last error: {last_error})" if last_error else ""))


# --- Queries ---------------------------------------------------------------------------------

def collect_queries():
    """[(source, where, expr)] for every dashboard query and every rule."""
    queries = []
    for path in sorted(glob.glob(os.path.join(SOURCE_DIR, "deploy", "grafana", "*.json"))):
        with open(path, encoding="utf-8") as f:
            dashboard = json.load(f)
        variables = {v.get("name") for v in (dashboard.get("templating") or {}).get("list") or []
                     if v.get("type") != "datasource"}
        for where, expr in dashboard_queries(dashboard):
            if expr is None:
                raise Failure(f"{os.path.basename(path)} {where}: cannot translate its query")
            queries.append((os.path.basename(path), where, substitute(expr, variables)))
    for group in rule_groups():
        for rule in group.get("rules") or []:
            name = rule.get("alert") or rule.get("record")
            expr, changed = to_bool_comparison(rule["expr"])
            where = f"rule {name}" + (" (comparison made bool)" if changed else "")
            queries.append(("prometheusrule.yaml", where, expr))
    return queries


def rule_groups():
    with open(os.path.join(SOURCE_DIR, "deploy", "k8s", "prometheusrule.yaml"),
              encoding="utf-8") as f:
        return yaml.safe_load(f)["spec"]["groups"]


# --- The cluster -----------------------------------------------------------------------------

def read_cluster(cluster_dir):
    """[{node, pid, metrics, ...}] from cluster.txt ("key=value" words, one daemon a line)."""
    daemons = []
    with open(os.path.join(cluster_dir, "cluster.txt"), encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                daemons.append(dict(w.split("=", 1) for w in line.split() if "=" in w))
    return daemons


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(daemons):
    """{(name, labels text): value} over every daemon's /metrics, read directly."""
    samples = {}
    for daemon in daemons:
        _, text = http_get(f"http://{daemon['metrics']}/metrics")
        for line in text.splitlines():
            m = SAMPLE.match(line)
            if m:
                samples[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return samples


def completed(samples):
    return sum(v for (name, _), v in samples.items() if name == "baton_collectives_completed_total")


def error_series(samples):
    return [k for k in samples
            if k[0] == "baton_collective_duration_seconds_count" and 'outcome="error"' in k[1]]


def children_of(pid):
    """Pids whose parent is pid (from /proc/*/stat)."""
    pids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat, encoding="utf-8", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            pids.append(int(stat.split("/")[2]))
    return pids


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


class Bench:
    """`baton bench` runs; tracks the process running now so that teardown can stop it."""

    def __init__(self, baton, cluster_dir, log_path):
        self.baton = baton
        self.cluster_dir = cluster_dir
        self.log_path = log_path
        self.process = None
        help_text = subprocess.run([baton, "bench", "--help"], capture_output=True, text=True,
                                   timeout=30, check=False)
        self.has_ops = "--algorithm" in help_text.stdout + help_text.stderr

    def start(self, args):
        command = [self.baton, "bench", f"--cluster={self.cluster_dir}"] + args
        with open(self.log_path, "a", encoding="utf-8") as out:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            preexec_fn=die_with_parent)
        return self.process

    def finish(self, timeout):
        try:
            rc = self.process.wait(timeout=timeout)
        finally:
            self.stop()
        return rc

    def stop(self):
        """Kills the bench run now going on, and its rank processes, if any."""
        if self.process is None:
            return
        if self.process.poll() is None:
            for child in children_of(self.process.pid):
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.kill()
            self.process.wait()
        self.process = None

    def run(self, args, deadline):
        self.start(args)
        try:
            rc = self.finish(deadline.left(60))
        except subprocess.TimeoutExpired as e:
            raise Failure(f"baton bench {' '.join(args)} did not finish in time") from e
        if rc != 0:
            raise Failure(f"baton bench {' '.join(args)} exited {rc}; see {self.log_path}")

    def load(self, deadline):
        """Runs the workload in a loop for LOAD_SECONDS (at least one full pass)."""
        common = ["-b", "1K", "-e", "256K", "-f", "16", "-n", "5", "-w", "1",
                  "--ranks-per-daemon=2", "--timeout-ms=20000"]
        # An older bench runs all_reduce only, and its --op is the reduce op.
        workload = WORKLOAD if self.has_ops else [("all_reduce", "")]
        start = time.monotonic()
        passes = 0
        while passes == 0 or time.monotonic() - start < LOAD_SECONDS:
            for op, algorithm in workload:
                args = list(common)
                if self.has_ops:
                    args.append(f"--op={op}")
                if algorithm:
                    args.append(f"--algorithm={algorithm}")
                self.run(args, deadline)
            passes += 1
        names = ", ".join(f"{op}/{algorithm or 'default'}" for op, algorithm in workload)
        log(f"load: {passes} pass(es) of {names} in {time.monotonic() - start:.1f} s")

    def fail_one_rank(self, daemons, deadline):
        """Starts a long all_reduce and SIGKILLs one of its ranks while collectives are in
        flight, so that the other daemons fail the communicator's operation (outcome error)."""
        for attempt in range(1, 4):
            before = completed(scrape(daemons))
            process = self.start(["-b", "256K", "-e", "256K", "-n", "1000000", "-w", "0",
                                  "--ranks-per-daemon=1", "--timeout-ms=20000"])
            try:
                # Running (or, wrongly, already over) once a few collectives have completed.
                wait_for("the long all_reduce to be running",
                         lambda: process.poll() is not None
                         or completed(scrape(daemons)) >= before + 3, deadline, 20)
                if process.poll() is not None:
                    raise Failure(f"the long all_reduce bench exited {process.returncode}; "
                                  f"see {self.log_path}")
                ranks = [p for p in children_of(process.pid) if b"bench-rank" in cmdline(p)]
                if not ranks:
                    raise Failure("found no bench-rank process to kill")
                os.kill(ranks[0], signal.SIGKILL)
                try:
                    self.finish(deadline.left(30))
                except subprocess.TimeoutExpired as e:
                    raise Failure("the bench did not end after one of its ranks was killed") from e
            finally:
                self.stop()
            errors = error_series(scrape(daemons))
            if errors:
                log(f"fault injection: killed rank pid {ranks[0]}; {len(errors)} series with "
                    f'outcome="error" (attempt {attempt})')
                return
        raise Failure('killing a rank three times produced no outcome="error" series')


# --- Prometheus ------------------------------------------------------------------------------

class Prometheus:
    def __init__(self, binary, workdir, daemons):
        self.binary = binary
        self.workdir = workdir
        self.process = None
        self.url = None
        rules = os.path.join(workdir, "batond-rules.yaml")
        with open(rules, "w", encoding="utf-8") as f:
            yaml.safe_dump({"groups": rule_groups()}, f, sort_keys=False)
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                       "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": [rules],
            "scrape_configs": [{
                "job_name": "batond",
                "static_configs": [{"targets": [d["metrics"]],
                                    "labels": {"__meta_baton_node_name": d["node"]}}
                                   for d in daemons],
                # Like the ServiceMonitor's relabeling of __meta_kubernetes_pod_node_name.
                "relabel_configs": [{"source_labels": ["__meta_baton_node_name"],
                                     "target_label": "node", "action": "replace"}],
            }],
        }
        self.config = os.path.join(workdir, "prometheus.yml")
        with open(self.config, "w", encoding="utf-8") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        self.log_path = os.path.join(workdir, "prometheus.log")

    def start(self, deadline):
        for _ in range(3):
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            with open(self.log_path, "a", encoding="utf-8") as log_file:
                self.process = subprocess.Popen(
                    [self.binary, f"--config.file={self.config}",
                     f"--storage.tsdb.path={os.path.join(self.workdir, 'tsdb')}",
                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                    stdout=log_file, stderr=subprocess.STDOUT, cwd=self.workdir,
                    preexec_fn=die_with_parent)
            try:
                wait_for("Prometheus to be ready",
                         lambda: self.process.poll() is not None
                         or http_get(f"{self.url}/-/ready")[0] == 200, deadline, 30)
            except Failure:
                self.stop()
                raise
            if self.process.poll() is None:
                log(f"prometheus: ready on {self.url}")
                return
            if "address already in use" not in self.tail():
                raise Failure(f"prometheus exited {self.process.returncode}:\n{self.tail()}")
        raise Failure("prometheus found no free port three times")

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self, lines=20):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def api(self, path, **params):
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            _, body = http_get(url, timeout=10)
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", "replace")
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise ValueError(f"{answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr):
        """[series] of an instant query (a scalar counts as one)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [data["result"]]
        return data["result"]

    def value(self, expr):
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None


# --- The test --------------------------------------------------------------------------------

def evaluate(prometheus, queries, exported):
    """Prints one line per query; returns the list of failure lines."""
    failures = []
    for source, where, expr in queries:
        one_line = " ".join(expr.split())
        try:
            result = prometheus.query(expr)
        except ValueError as e:
            log(f"ERROR  {source} {where}: {one_line}\n       {e}")
            failures.append(f"ERROR {source} {where}: {e}")
            continue
        if result:
            log(f"OK     {len(result):3d} series  {source} {where}: {one_line}")
            continue
        missing = sorted(m for m in promql_metric_names(expr) if m != "up" and m not in exported)
        note = f" (not exported by batond: {', '.join(missing)})" if missing else ""
        log(f"EMPTY            {source} {where}: {one_line}{note}")
        failures.append(f"EMPTY {source} {where}{note}")
    return failures


def check_rules(prometheus):
    """Every loaded rule has been evaluated without error."""
    failures = []
    rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
    if len(rules) != sum(len(g.get("rules") or []) for g in rule_groups()):
        failures.append(f"prometheus loaded {len(rules)} rules")
    for rule in rules:
        state = rule.get("state", "")
        log(f"rule   {rule['name']}: health {rule.get('health')}"
            + (f", {state}" if state else "") + (f", {rule['lastError']}" if rule.get("lastError")
                                                 else ""))
        if rule.get("health") != "ok":
            failures.append(f"rule {rule['name']}: health {rule.get('health')} "
                            f"{rule.get('lastError', '')}")
    return failures


def run(baton, batond, prometheus_binary, workdir, deadline, cleanup):
    queries = collect_queries()
    log(f"{len(queries)} expressions to check")
    cluster_dir = os.path.join(workdir, "cluster")
    up = subprocess.run([baton, "local", "up", f"--nodes={NODES}", f"--dir={cluster_dir}",
                         f"--batond={batond}"], capture_output=True, text=True,
                        timeout=deadline.left(30), check=False)
    cleanup.append(lambda: subprocess.run([baton, "local", "down", f"--dir={cluster_dir}"],
                                          capture_output=True, timeout=30, check=False))
    if up.returncode != 0:
        raise Failure(f"baton local up exited {up.returncode}: {up.stdout}{up.stderr}")
    daemons = read_cluster(cluster_dir)
    if len(daemons) != NODES or any(not d.get("metrics", "").startswith("127.0.0.1:")
                                    for d in daemons):
        raise Failure(f"cluster.txt lists {daemons}, want {NODES} daemons on 127.0.0.1")

    prometheus = Prometheus(prometheus_binary, workdir, daemons)
    cleanup.append(prometheus.stop)
    prometheus.start(deadline)
    wait_for(f"Prometheus to scrape {NODES} batond targets",
             lambda: prometheus.value('count(up{job="batond", node=~"node-.+"} == 1)') == NODES,
             deadline, 20)

    bench = Bench(baton, cluster_dir, os.path.join(workdir, "bench.log"))
    cleanup.append(bench.stop)
    bench.load(deadline)
    bench.fail_one_rank(daemons, deadline)

    # Prometheus has what the daemons have now: the same completed count and series count.
    samples = scrape(daemons)
    want_completed = completed(samples)
    want_series = sum(1 for k in samples if k[0] == "baton_collective_duration_seconds_count")
    wait_for("Prometheus to scrape the final counters",
             lambda: prometheus.value("sum(baton_collectives_completed_total)") == want_completed
             and prometheus.value("count(baton_collective_duration_seconds_count)") == want_series,
             deadline, 20)
    # A rate needs two samples: the outcome="error" series, born a moment ago, may have one.
    synced = time.time()
    wait_for("one more scrape of every daemon",
             lambda: (prometheus.value('min(timestamp(up{job="batond"}))') or 0) > synced,
             deadline, 10)
    # ... and Prometheus has evaluated its rules since.
    scraped = time.time()
    wait_for("a rule evaluation after the last scrape",
             lambda: all(g.get("lastEvaluation", "") and
                         _rfc3339(g["lastEvaluation"]) > scraped
                         for g in prometheus.api("rules")["groups"]), deadline, 10)

    exported = {name for name, _ in samples}
    exported |= {re.sub(r"_(bucket|count|sum)$", "", n) for n in exported}
    failures = evaluate(prometheus, queries, exported)
    failures += check_rules(prometheus)
    return queries, failures


def _rfc3339(text):
    """Seconds since the epoch of Prometheus' RFC 3339 timestamps (nanoseconds, Z or offset)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text)
    if not m:
        raise ValueError(f"bad timestamp {text!r}")
    seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    if m.group(3) != "Z":
        sign = 1 if m.group(3)[0] == "+" else -1
        seconds -= sign * (int(m.group(3)[1:3]) * 3600 + int(m.group(3)[4:6]) * 60)
    return seconds + float(m.group(2) or 0)


def main():
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} BATON BATOND", file=sys.stderr)
        return 2
    baton, batond = (os.path.abspath(a) for a in sys.argv[1:])
    prometheus_binary = shutil.which("prometheus")
    if prometheus_binary is None or shutil.which("promtool") is None:
        print("SKIP: prometheus/promtool are not installed (Debian: prometheus)")
        return 77

    # SIGTERM (ctest's timeout, a CI runner) unwinds like an exception, so cleanup runs.
    def on_signal(signum, _frame):
        raise Failure(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    started = time.monotonic()
    deadline = Deadline(OVERALL_SECONDS)
    workdir = tempfile.mkdtemp(prefix="baton-prom-")
    cleanup = []
    failures = []
    try:
        queries, failures = run(baton, batond, prometheus_binary, workdir, deadline, cleanup)
    except Exception as e:  # a bug here must still stop the cluster and Prometheus
        failures = [str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {e}"]
        queries = []
    finally:
        for step in reversed(cleanup):
            try:
                step()
            except Exception as e:  # cleanup goes on whatever one step raised
                print(f"cleanup: {e}")
        if failures:
            for name in ("bench.log", "prometheus.log"):
                path = os.path.join(workdir, name)
                if os.path.exists(path):
                    with open(path, encoding="utf-8", errors="replace") as f:
                        print(f"--- last lines of {name}\n{''.join(f.readlines()[-15:])}", end="")
        if os.environ.get("BATON_KEEP_TMP"):
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started
    if failures:
        for line in failures:
            print(f"FAIL: {line}")
        print(f"prometheus_queries_test: {len(failures)} failure(s) in {elapsed:.0f} s")
        return 1
    print(f"prometheus_queries_test: {len(queries)} expressions returned data ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
