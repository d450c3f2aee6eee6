#!/usr/bin/env python3
"""Structural check of the Kubernetes manifests in deploy/k8s.

Usage: k8s_manifests_test.py SOURCE_DIR

Not a schema validation: k8s_schema_test.py validates every manifest but
kustomization.yaml, offline, against the Kubernetes OpenAPI and prometheus-operator CRD schemas.
This test checks what the schemas cannot: that every file parses, that kinds and apiVersions are
the expected ones, the DaemonSet settings that batond depends on, that the ConfigMap only uses
documented config keys (docs/config.md), that alerts only use metrics documented in
docs/metrics.md, that grafana-dashboards.yaml is what scripts/gen_grafana_configmap.py writes
from deploy/grafana/*.json, that those dashboards take their datasource from a `datasource`
variable and query only documented metrics, and that kustomization.yaml lists every manifest.
Exits 0 on success, 1 with one line per failure otherwise, 77 (skip) without PyYAML.
"""

import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from promql_helpers import (GRAFANA_BUILTINS, dashboard_queries, iter_panels,
                            promql_metric_names, referenced_variables)

try:
    import yaml
except ImportError:
    print(f"SKIP: PyYAML is not installed in {sys.prefix} (tests/requirements.txt; "
          "run scripts/setup_python.sh)")
    sys.exit(77)

EXPECTED_KINDS = {
    "namespace.yaml": ("v1", "Namespace"),
    "configmap.yaml": ("v1", "ConfigMap"),
    "daemonset.yaml": ("apps/v1", "DaemonSet"),
    "service.yaml": ("v1", "Service"),
    "servicemonitor.yaml": ("monitoring.coreos.com/v1", "ServiceMonitor"),
    "prometheusrule.yaml": ("monitoring.coreos.com/v1", "PrometheusRule"),
    "grafana-dashboards.yaml": ("v1", "ConfigMap"),
    "kustomization.yaml": ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
}
NAMESPACE = "baton-system"
METRICS_PORT = 9460
SOCKET_DIR = "/run/baton"
TLS_DIR = "/etc/baton-tls"  # the Secret with the daemons' certificates
TLS_KEYS = {"tls_cert", "tls_key", "tls_ca"}
# Series Prometheus itself adds to every scrape target; not in docs/metrics.md.
PROMETHEUS_SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# `kubectl apply` (client side) stores the whole object in an annotation limited to 256 KiB.
ANNOTATION_LIMIT = 262144
PROMETHEUS_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

failures = []


def fail(where, message):
    failures.append(f"{where}: {message}")


def get(obj, path, default=None):
    """get(d, "a.b.0.c") walks dicts and lists; returns default when a step is missing."""
    for step in path.split("."):
        if isinstance(obj, dict) and step in obj:
            obj = obj[step]
        elif isinstance(obj, list) and step.isdigit() and int(step) < len(obj):
            obj = obj[int(step)]
        else:
            return default
    return obj


def expect(where, obj, path, want):
    got = get(obj, path)
    if got != want:
        fail(where, f"{path} is {got!r}, want {want!r}")


def documented_config_keys(source_dir):
    """Keys of the table under '## Options' in docs/config.md (first column, in backquotes)."""
    path = os.path.join(source_dir, "docs", "config.md")
    keys = set()
    in_options = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_options = line.strip() == "## Options"
                continue
            m = re.match(r"^\|\s*`([a-z0-9_]+)`\s*\|", line)
            if in_options and m:
                keys.add(m.group(1))
    if not keys:
        fail(path, "found no option table under '## Options'")
    return keys


def documented_metrics(source_dir):
    """Metric names in the first column of docs/metrics.md's tables, histograms expanded."""
    path = os.path.join(source_dir, "docs", "metrics.md")
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|\s*([a-z]+)\s*\|", line)
            if not m:
                continue
            name, kind = m.groups()
            names.add(name)
            if kind == "histogram":
                names.update({name + "_bucket", name + "_count", name + "_sum"})
            elif kind == "summary":
                names.update({name + "_count", name + "_sum"})
    if not names:
        fail(path, "found no metric table")
    return names


def check_daemonset(where, ds):
    expect(where, ds, "metadata.namespace", NAMESPACE)
    expect(where, ds, "spec.updateStrategy.type", "RollingUpdate")
    expect(where, ds, "spec.updateStrategy.rollingUpdate.maxUnavailable", 1)
    pod = get(ds, "spec.template.spec", {})
    # Shared memory comes as descriptors over the session socket: no host IPC namespace.
    if pod.get("hostIPC"):
        fail(where, "hostIPC is set, but batond needs no host IPC namespace")
    for key, want in (("hostNetwork", True),
                      ("dnsPolicy", "ClusterFirstWithHostNet"),
                      ("priorityClassName", "system-node-critical")):
        expect(where, pod, key, want)
    if not isinstance(pod.get("terminationGracePeriodSeconds"), int):
        fail(where, "pod spec has no terminationGracePeriodSeconds")
    selector = get(ds, "spec.selector.matchLabels", {}) or {}
    labels = get(ds, "spec.template.metadata.labels", {}) or {}
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        fail(where, f"spec.selector.matchLabels {selector} do not match the template's labels")

    tolerations = pod.get("tolerations") or []
    if not any(t.get("key") == "nvidia.com/gpu" for t in tolerations):
        fail(where, "no toleration for nvidia.com/gpu")
    if not any(t.get("operator") == "Exists" and "key" not in t and t.get("effect") == "NoSchedule"
               for t in tolerations):
        fail(where, "no catch-all NoSchedule toleration (operator Exists, no key)")

    containers = pod.get("containers") or []
    batond = next((c for c in containers if c.get("name") == "batond"), None)
    if batond is None:
        fail(where, "no container named batond")
        return
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        expect(where, batond, f"{probe}.httpGet.path", path)
        port = get(batond, f"{probe}.httpGet.port")
        if port not in (METRICS_PORT, "metrics"):
            fail(where, f"{probe}.httpGet.port is {port!r}, want {METRICS_PORT}")
    ports = {p.get("name"): p.get("containerPort") for p in batond.get("ports") or []}
    if ports.get("metrics") != METRICS_PORT:
        fail(where, f"container port 'metrics' is {ports.get('metrics')!r}, want {METRICS_PORT}")

    env = {e.get("name"): e for e in batond.get("env") or []}
    for name, field in (("NODE_NAME", "spec.nodeName"), ("HOST_IP", "status.hostIP")):
        got = get(env.get(name, {}), "valueFrom.fieldRef.fieldPath")
        if got != field:
            fail(where, f"env {name} comes from {got!r}, want downward API fieldRef {field!r}")
    if "--advertise-host=$(HOST_IP)" not in (batond.get("args") or []):
        fail(where, "args lack --advertise-host=$(HOST_IP)")
    if not any(a.startswith("--config=") for a in batond.get("args") or []):
        fail(where, "args lack --config=FILE")

    expect(where, batond, "securityContext.privileged", False)
    if "IPC_LOCK" not in (get(batond, "securityContext.capabilities.add") or []):
        fail(where, "securityContext.capabilities.add lacks IPC_LOCK")
    if not get(batond, "resources.requests"):
        fail(where, "container has no resources.requests")

    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    mounts = {m.get("mountPath"): m.get("name") for m in batond.get("volumeMounts") or []}
    if "DAC_OVERRIDE" in (get(batond, "securityContext.capabilities.add") or []):
        fail(where, "DAC_OVERRIDE is added, but batond opens no file of a rank's")
    for host_path, want_type in ((SOCKET_DIR, "DirectoryOrCreate"), ("/dev/infiniband", "")):
        volume = next((v for v in volumes.values() if get(v, "hostPath.path") == host_path), None)
        if volume is None:
            fail(where, f"no hostPath volume for {host_path}")
            continue
        if want_type is not None and get(volume, "hostPath.type") != want_type:
            fail(where, f"hostPath {host_path} has type {get(volume, 'hostPath.type')!r}, "
                        f"want {want_type!r}")
        if mounts.get(host_path) != volume.get("name"):
            fail(where, f"hostPath volume {volume.get('name')!r} is not mounted at {host_path}")
    config_volume = next((v for v in volumes.values() if "configMap" in v), None)
    if config_volume is None or mounts.get("/etc/baton") != config_volume.get("name"):
        fail(where, "ConfigMap volume is not mounted at /etc/baton")
    tls_volume = next((v for v in volumes.values() if "secret" in v), None)
    if tls_volume is None or mounts.get(TLS_DIR) != tls_volume.get("name"):
        fail(where, f"no Secret volume (the daemons' TLS certificates) is mounted at {TLS_DIR}")
    elif get(tls_volume, "secret.optional"):
        fail(where, "the TLS Secret is optional: pods would start without mutual TLS")


def check_configmap(where, cm, keys):
    expect(where, cm, "metadata.namespace", NAMESPACE)
    conf = (cm.get("data") or {}).get("batond.conf")  # the key has a dot: no get()
    if not isinstance(conf, str):
        fail(where, "data has no batond.conf")
        return
    seen = set()
    for number, line in enumerate(conf.splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z0-9_-]+)\s*=\s*(\S.*)$", text)
        if not m:
            fail(where, f"batond.conf line {number} is not 'key = value': {line!r}")
            continue
        key = m.group(1).replace("-", "_")
        if key not in keys:
            fail(where, f"batond.conf line {number}: key {key!r} is not in docs/config.md "
                        f"(documented: {', '.join(sorted(keys))})")
        if key in seen:
            fail(where, f"batond.conf line {number}: key {key!r} set twice")
        seen.add(key)
        if key == "socket" and not m.group(2).strip('"').startswith(SOCKET_DIR + "/"):
            fail(where, f"socket {m.group(2)!r} is not in the hostPath directory {SOCKET_DIR}")
        if key == "metrics_listen" and not m.group(2).strip('"').endswith(f":{METRICS_PORT}"):
            fail(where, f"metrics_listen {m.group(2)!r} is not on port {METRICS_PORT}, "
                        "which the probes and the Service use")
        if key in TLS_KEYS and not m.group(2).strip('"').startswith(TLS_DIR + "/"):
            fail(where, f"{key} {m.group(2)!r} is not in the Secret's directory {TLS_DIR}")
    for key in TLS_KEYS - seen:
        fail(where, f"batond.conf does not set {key}: the daemons would run without mutual TLS")


def check_service(where, svc):
    expect(where, svc, "metadata.namespace", NAMESPACE)
    expect(where, svc, "spec.clusterIP", "None")
    ports = {p.get("name"): p.get("port") for p in get(svc, "spec.ports") or []}
    if ports.get("metrics") != METRICS_PORT:
        fail(where, f"no port named metrics on {METRICS_PORT} (ports: {ports})")


def check_servicemonitor(where, sm, service):
    endpoints = get(sm, "spec.endpoints") or []
    if not endpoints:
        fail(where, "no endpoints")
        return
    endpoint = endpoints[0]
    expect(where, endpoint, "port", "metrics")
    expect(where, endpoint, "interval", "15s")
    if not any(r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"]
               and r.get("targetLabel") == "node" for r in endpoint.get("relabelings") or []):
        fail(where, "no relabeling of __meta_kubernetes_pod_node_name to node")
    selector = get(sm, "spec.selector.matchLabels") or {}
    service_labels = get(service or {}, "metadata.labels") or {}
    if not selector or any(service_labels.get(k) != v for k, v in selector.items()):
        fail(where, f"spec.selector.matchLabels {selector} do not select the batond Service")


def check_prometheusrule(where, rule, metrics):
    count = 0
    for group in get(rule, "spec.groups") or []:
        for r in group.get("rules") or []:
            name = r.get("alert") or r.get("record") or "?"
            expr = r.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                fail(where, f"rule {name} has no expr")
                continue
            count += 1
            used = promql_metric_names(expr)
            if not used:
                fail(where, f"rule {name}: found no metric in {expr!r}")
            for metric in sorted(used):
                if metric not in metrics and metric not in PROMETHEUS_SYNTHETIC:
                    fail(where, f"rule {name} uses {metric!r}, which docs/metrics.md does not list")
    if count == 0:
        fail(where, "no rules")


def check_dashboard(where, dashboard, metrics):
    """A Grafana dashboard: uid, datasource variable, every panel and query on it, documented
    metrics only, defined variables only."""
    for key in ("uid", "title"):
        if not isinstance(dashboard.get(key), str) or not dashboard.get(key):
            fail(where, f"no {key}")
    if not isinstance(dashboard.get("schemaVersion"), int) or dashboard["schemaVersion"] < 36:
        fail(where, f"schemaVersion {dashboard.get('schemaVersion')!r}, want 36 or later")
    if "__inputs" in dashboard:
        fail(where, "has __inputs (an export for sharing): provisioning cannot fill them in")
    variables = {v.get("name"): v for v in get(dashboard, "templating.list") or []}
    datasource = variables.get("datasource") or {}
    if datasource.get("type") != "datasource" or datasource.get("query") != "prometheus":
        fail(where, "no variable `datasource` of type datasource with query prometheus")
    for name, variable in variables.items():
        if variable.get("type") == "query" and variable.get("datasource") != PROMETHEUS_DATASOURCE:
            fail(where, f"variable {name}: datasource is {variable.get('datasource')!r}, "
                        f"want {PROMETHEUS_DATASOURCE}")

    # No datasource may be named by a fixed uid anywhere: only ${datasource}, and Grafana's
    # built-in annotation source.
    def walk(obj, path):
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key == "datasource" and value is not None:
                    uid = value.get("uid") if isinstance(value, dict) else value
                    if uid not in ("${datasource}", "-- Grafana --"):
                        fail(where, f"{path}.datasource is {value!r}: use ${{datasource}}")
                else:
                    walk(value, f"{path}.{key}")
        elif isinstance(obj, list):
            for i, value in enumerate(obj):
                walk(value, f"{path}.{i}")

    walk(dashboard, "$")
    ids = [p.get("id") for p in iter_panels(dashboard)]
    for panel_id in sorted({i for i in ids if ids.count(i) > 1}, key=str):
        fail(where, f"panel id {panel_id!r} used more than once")
    for panel in iter_panels(dashboard):
        title = panel.get("title")
        if panel.get("type") == "row":
            continue
        if "gridPos" not in panel:
            fail(where, f"panel {title!r} has no gridPos")
        if panel.get("datasource") != PROMETHEUS_DATASOURCE:
            fail(where, f"panel {title!r}: datasource is {panel.get('datasource')!r}, "
                        f"want {PROMETHEUS_DATASOURCE}")
        if not panel.get("targets"):
            fail(where, f"panel {title!r} has no targets")
        for target in panel.get("targets") or []:
            if target.get("datasource", PROMETHEUS_DATASOURCE) != PROMETHEUS_DATASOURCE:
                fail(where, f"panel {title!r} target {target.get('refId')}: datasource is "
                            f"{target.get('datasource')!r}")
            if not isinstance(target.get("expr"), str) or not target["expr"].strip():
                fail(where, f"panel {title!r} target {target.get('refId')} has no expr")

    queries = dashboard_queries(dashboard)
    if not queries:
        fail(where, "no queries")
    for what, expr in queries:
        if expr is None:
            fail(where, f"{what}: query form not supported by prometheus_queries_test "
                        "(use label_values(SELECTOR, LABEL) or query_result(EXPR))")
            continue
        for name in sorted(referenced_variables(expr)):
            if name not in variables and name not in GRAFANA_BUILTINS:
                fail(where, f"{what} uses ${name}, which is not a variable of the dashboard")
        used = promql_metric_names(expr)
        if not used:
            fail(where, f"{what}: found no metric in {expr!r}")
        for metric in sorted(used):
            if metric not in metrics and metric not in PROMETHEUS_SYNTHETIC:
                fail(where, f"{what} uses {metric!r}, which docs/metrics.md does not list")


def check_grafana_dashboards(where, cm, source_dir, metrics):
    """The sidecar ConfigMap: generated from deploy/grafana/*.json, labelled, small enough."""
    expect(where, cm, "metadata.namespace", NAMESPACE)
    expect(where, cm, "metadata.labels.grafana_dashboard", "1")
    generator = os.path.join(source_dir, "scripts", "gen_grafana_configmap.py")
    run = subprocess.run([sys.executable, generator, "--stdout", source_dir], capture_output=True,
                         text=True, check=False, timeout=60)
    if run.returncode != 0:
        fail(where, f"{generator} failed: {run.stderr.strip()}")
    else:
        with open(os.path.join(source_dir, "deploy", "k8s", "grafana-dashboards.yaml"),
                  encoding="utf-8") as f:
            if f.read() != run.stdout:
                fail(where, "differs from what scripts/gen_grafana_configmap.py writes: "
                            "rerun the script")
    size = len(json.dumps(cm))
    if size >= ANNOTATION_LIMIT:
        fail(where, f"{size} bytes as JSON: kubectl apply's last-applied annotation holds at "
                    f"most {ANNOTATION_LIMIT}; split the ConfigMap")

    grafana_dir = os.path.join(source_dir, "deploy", "grafana")
    files = sorted(f for f in os.listdir(grafana_dir) if f.endswith(".json"))
    data = cm.get("data") or {}
    if sorted(data) != files:
        fail(where, f"data keys {sorted(data)} are not the files in deploy/grafana {files}")
    uids = {}
    for name in files:
        with open(os.path.join(grafana_dir, name), encoding="utf-8") as f:
            try:
                dashboard = json.load(f)
            except json.JSONDecodeError as e:
                fail(f"deploy/grafana/{name}", f"does not parse: {e}")
                continue
        uid = dashboard.get("uid")
        if uid in uids:
            fail(f"deploy/grafana/{name}", f"uid {uid!r} also used by {uids[uid]}")
        uids[uid] = name
        check_dashboard(f"deploy/grafana/{name}", dashboard, metrics)


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} SOURCE_DIR", file=sys.stderr)
        return 2
    source_dir = sys.argv[1]
    k8s_dir = os.path.join(source_dir, "deploy", "k8s")
    if not os.path.isdir(k8s_dir):
        print(f"FAIL: {k8s_dir} does not exist")
        return 1

    files = sorted(f for f in os.listdir(k8s_dir) if f.endswith((".yaml", ".yml")))
    docs = {}
    for name in files:
        where = f"deploy/k8s/{name}"
        try:
            with open(os.path.join(k8s_dir, name), encoding="utf-8") as f:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            fail(where, f"does not parse: {e}")
            continue
        if len(loaded) != 1 or not isinstance(loaded[0], dict):
            fail(where, f"holds {len(loaded)} documents, want one mapping")
            continue
        docs[name] = loaded[0]
        if name not in EXPECTED_KINDS:
            fail(where, "unexpected file; add it to EXPECTED_KINDS in this test")
            continue
        api_version, kind = EXPECTED_KINDS[name]
        expect(where, docs[name], "apiVersion", api_version)
        expect(where, docs[name], "kind", kind)
    for name in EXPECTED_KINDS:
        if name not in files:
            fail("deploy/k8s", f"{name} is missing")

    keys = documented_config_keys(source_dir)
    metrics = documented_metrics(source_dir)
    checks = {
        "daemonset.yaml": lambda w, d: check_daemonset(w, d),
        "configmap.yaml": lambda w, d: check_configmap(w, d, keys),
        "service.yaml": check_service,
        "servicemonitor.yaml": lambda w, d: check_servicemonitor(w, d, docs.get("service.yaml")),
        "prometheusrule.yaml": lambda w, d: check_prometheusrule(w, d, metrics),
        "grafana-dashboards.yaml": lambda w, d: check_grafana_dashboards(w, d, source_dir,
                                                                         metrics),
        "namespace.yaml": lambda w, d: expect(w, d, "metadata.name", NAMESPACE),
    }
    for name, check in checks.items():
        if name in docs:
            check(f"deploy/k8s/{name}", docs[name])

    kustomization = docs.get("kustomization.yaml")
    if kustomization is not None:
        listed = kustomization.get("resources") or []
        wanted = [f for f in files if f != "kustomization.yaml"]
        for name in wanted:
            if name not in listed:
                fail("deploy/k8s/kustomization.yaml", f"resources does not list {name}")
        for name in listed:
            if name not in wanted:
                fail("deploy/k8s/kustomization.yaml", f"resources lists {name}, not in the folder")

    if failures:
        for line in failures:
            print(f"FAIL: {line}")
        print(f"k8s_manifests_test: {len(failures)} failure(s)")
        return 1
    print(f"k8s_manifests_test: {len(files)} manifests OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
