#!/usr/bin/env python3
"""Checks the alert rules of deploy/k8s/prometheusrule.yaml with Prometheus' own promtool.

Usage: prometheus_rules_test.py SOURCE_DIR

Writes the PrometheusRule's spec.groups as a plain rules file (batond-rules.yaml) in a temporary
directory, runs `promtool check rules` on it, then `promtool test rules` on a copy of
tests/deploy/alerts_test.yaml placed next to it. Also checks that alerts_test.yaml covers every
alert with at least one evaluation where it fires and one where it stays silent. Exits 0 on
success, 1 on failure, 77 (skip) without promtool (Debian: prometheus) or PyYAML.
"""

import os
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print(f"SKIP: PyYAML is not installed in {sys.prefix} (tests/requirements.txt; "
          "run scripts/setup_python.sh)")
    sys.exit(77)

RULES_FILE = "batond-rules.yaml"


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} SOURCE_DIR", file=sys.stderr)
        return 2
    source_dir = sys.argv[1]
    promtool = shutil.which("promtool")
    if promtool is None:
        print("SKIP: promtool is not installed (Debian: prometheus)")
        return 77
    with open(os.path.join(source_dir, "deploy", "k8s", "prometheusrule.yaml"),
              encoding="utf-8") as f:
        groups = yaml.safe_load(f)["spec"]["groups"]
    test_path = os.path.join(source_dir, "tests", "deploy", "alerts_test.yaml")
    with open(test_path, encoding="utf-8") as f:
        unit_tests = yaml.safe_load(f)

    failures = []
    if unit_tests.get("rule_files") != [RULES_FILE]:
        failures.append(f"alerts_test.yaml: rule_files must be [{RULES_FILE}]")
    alerts = [r["alert"] for g in groups for r in g.get("rules") or [] if "alert" in r]
    fires, silent = set(), set()
    for case in unit_tests.get("tests") or []:
        for check in case.get("alert_rule_test") or []:
            (fires if check.get("exp_alerts") else silent).add(check.get("alertname"))
    for alert in alerts:
        if alert not in fires:
            failures.append(f"alerts_test.yaml: no evaluation where {alert} fires")
        if alert not in silent:
            failures.append(f"alerts_test.yaml: no evaluation where {alert} stays silent")
    for name in sorted((fires | silent) - set(alerts)):
        failures.append(f"alerts_test.yaml: tests {name}, which prometheusrule.yaml lacks")

    with tempfile.TemporaryDirectory(prefix="baton-rules-") as tmp:
        with open(os.path.join(tmp, RULES_FILE), "w", encoding="utf-8") as f:
            yaml.safe_dump({"groups": groups}, f, sort_keys=False)
        shutil.copy(test_path, os.path.join(tmp, "alerts_test.yaml"))
        for args in (["check", "rules", RULES_FILE], ["test", "rules", "alerts_test.yaml"]):
            run = subprocess.run([promtool] + args, cwd=tmp, capture_output=True, text=True,
                                 timeout=60, check=False)
            print(f"$ promtool {' '.join(args)}\n{run.stdout}{run.stderr}", end="")
            if run.returncode != 0:
                failures.append(f"promtool {' '.join(args)} exited {run.returncode}")

    if failures:
        for line in failures:
            print(f"FAIL: {line}")
        return 1
    print(f"prometheus_rules_test: {len(alerts)} alerts checked and unit-tested")
    return 0


if __name__ == "__main__":
    sys.exit(main())
