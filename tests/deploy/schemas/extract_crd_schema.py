#!/usr/bin/env python3
"""Writes the JSON schema file that k8s_schema_test.py reads for one CustomResourceDefinition.

Usage: extract_crd_schema.py CRD_YAML SOURCE > OUT.json

CRD_YAML is a CustomResourceDefinition as a release publishes it (one version served); SOURCE
says where it came from (repository, tag, commit, path) and is written into the output. The
output keeps the served version's openAPIV3Schema exactly, minus every `description` (which
validates nothing and is most of the bytes): types, required fields, enums, patterns, formats,
defaults and the x-kubernetes-* markers stay as they are. See README.md beside this file.
"""

import json
import sys

import yaml


def without_descriptions(node):
    if isinstance(node, dict):
        # A property may itself be named "description": only drop the keyword, which is a string.
        return {key: without_descriptions(value) for key, value in node.items()
                if not (key == "description" and isinstance(value, str))}
    if isinstance(node, list):
        return [without_descriptions(value) for value in node]
    return node


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    with open(sys.argv[1], encoding="utf-8") as f:
        crd = yaml.safe_load(f)
    if crd.get("kind") != "CustomResourceDefinition":
        sys.exit(f"{sys.argv[1]}: not a CustomResourceDefinition")
    spec = crd["spec"]
    served = [v for v in spec["versions"] if v.get("served")]
    if len(served) != 1:
        sys.exit(f"{sys.argv[1]}: {len(served)} served versions, expected one")
    version = served[0]
    out = {
        "source": sys.argv[2],
        "crd": crd["metadata"]["name"],
        "operatorVersion": crd["metadata"].get("annotations", {}).get(
            "operator.prometheus.io/version", ""),
        "apiVersion": f"{spec['group']}/{version['name']}",
        "kind": spec["names"]["kind"],
        "openAPIV3Schema": without_descriptions(version["schema"]["openAPIV3Schema"]),
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
