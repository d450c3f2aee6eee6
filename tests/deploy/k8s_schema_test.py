#!/usr/bin/env python3
"""Validates every document of every deploy/k8s/*.yaml against the Kubernetes and
prometheus-operator schemas, offline.

Usage: k8s_schema_test.py MANIFEST_DIR

kustomization.yaml is skipped: it is kustomize's input, not a Kubernetes object.

Core kinds are validated against the Kubernetes JSON schemas that kubernetes-validate (pinned in
tests/requirements.txt) bundles, of every version in KUBERNETES_VERSIONS, in their strict variant
and with jsonschema directly so that every error is reported, not only the first: like
`kubectl apply --validate=strict`, a field that the schema does not define is an error. Those
schemas (from the OpenAPI v2 spec) check types, required fields, apiVersion and kind; they have
no enums of field values.

ServiceMonitor and PrometheusRule are validated against the openAPIV3Schema of their
prometheus-operator CRDs, vendored in schemas/ (see schemas/README.md), with jsonschema, the way
the API server treats a structural schema: a field that a schema does not declare is an error
where the API server would prune it (every object without x-kubernetes-preserve-unknown-fields
or additionalProperties), x-kubernetes-int-or-string admits integers and strings, list-type set
and map lists admit no duplicates, int32/int64/date-time formats are checked. Their metadata is
validated as Kubernetes' ObjectMeta.

YAML is read as YAML 1.1, like the Go YAML library Kubernetes uses (`on`, `yes`: booleans);
duplicate keys and mapping keys that are not strings are errors; timestamps stay strings.

Then every case of MUTATIONS, a deliberate error in a copy of one of the manifests, must be
rejected at the place it was made; the test fails when one is accepted, so a check that stopped
checking is noticed.

Prints one line per document, "<file>#<n> <Kind>/<name> OK" or "... FAIL" followed by one
indented line per error, then each mutation, "rejected" or "FAIL" with the error that rejected
it or why it was not, then a summary. Exits 0 when every document is valid and every mutation
rejected, 1 otherwise, 77 (skip) when a module is missing (run scripts/setup_python.sh;
tests/deploy/CMakeLists.txt runs this with that venv's interpreter).
"""

import copy
import datetime
import functools
import json
import os
import re
import sys
from importlib import metadata

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

try:
    import jsonschema
    import kubernetes_validate
    import referencing
    import yaml
except ImportError as e:
    print(f"SKIP: Python module {e.name} is not installed in {sys.prefix} "
          "(tests/requirements.txt; run scripts/setup_python.sh)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
# The oldest Kubernetes the manifests are meant for and the newest that kubernetes-validate
# 1.37.0 bundles; a manifest must be valid in both.
KUBERNETES_VERSIONS = ("1.30", "1.37")
CRD_SCHEMA_FILES = ("schemas/servicemonitors.json", "schemas/prometheusrules.json")


# --- YAML ---------------------------------------------------------------------------------------

class ManifestLoader(yaml.SafeLoader):
    """PyYAML's safe loader (YAML 1.1), made as strict as Kubernetes' parser where it matters."""


def _construct_mapping(loader, node):
    own = sum(1 for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge")
    loader.flatten_mapping(node)  # merge keys (<<): the merged pairs come first, then its own
    first_own = len(node.value) - own
    mapping, own_keys = {}, set()
    for i, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"mapping key {key!r} is not a string (quote it)", key_node.start_mark)
        if i >= first_own:  # a key may override a merged one, not one of its own mapping
            if key in own_keys:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            own_keys.add(key)
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


ManifestLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# Kubernetes turns YAML into JSON, which has no timestamps; "=" is a plain string to it too.
ManifestLoader.add_constructor("tag:yaml.org,2002:timestamp",
                               yaml.constructor.SafeConstructor.construct_yaml_str)
ManifestLoader.add_constructor("tag:yaml.org,2002:value",
                               yaml.constructor.SafeConstructor.construct_yaml_str)


def load_documents(text):
    """The non-empty documents of a YAML stream; raises yaml.YAMLError."""
    return [d for d in yaml.load_all(text, Loader=ManifestLoader) if d is not None]


def yaml_error(e):
    mark = getattr(e, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"YAML: {problem}{where}"


# --- prometheus-operator CRD schemas ------------------------------------------------------------

# Keywords of a structural schema, and what becomes of them in JSON Schema.
_KEPT = {"type", "properties", "items", "additionalProperties", "required", "enum", "pattern",
         "format", "minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems",
         "uniqueItems", "multipleOf", "minProperties", "maxProperties", "anyOf", "oneOf", "allOf",
         "not", "x-kubernetes-list-type", "x-kubernetes-list-map-keys"}
_DROPPED = {"description", "default", "example", "x-kubernetes-map-type"}  # validate nothing
_HANDLED = {"nullable", "exclusiveMinimum", "exclusiveMaximum", "x-kubernetes-int-or-string",
            "x-kubernetes-preserve-unknown-fields"}


def go_regex_to_python(pattern, where):
    """A Go (RE2) pattern as a Python one: where Go sets flags after a leading ^, as in
    ^(?i)(abort|warn)?$, Python wants them first. Raises ValueError on what Python rejects."""
    pattern = re.sub(r"^\^(\(\?[ims]+\))", r"\1^", pattern)
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{where or '/'}: pattern {pattern!r} is not a Python regex: {e}")
    return pattern


def structural_to_json_schema(node, where, in_junctor=False):
    """JSON Schema (2020-12) for an OpenAPI v3 structural schema of a CRD.

    Objects get additionalProperties false unless they preserve unknown fields or declare
    additionalProperties: the API server prunes such fields, and strict field validation reports
    them. Not inside anyOf/allOf/oneOf/not, which may only restate the outer schema's fields.
    Raises ValueError on a keyword it does not know (x-kubernetes-validations, CEL rules, for
    one), so that a newer CRD is not validated less than it says.
    """
    if not isinstance(node, dict):
        raise ValueError(f"{where or '/'}: schema is not an object")
    unknown = set(node) - _KEPT - _DROPPED - _HANDLED
    if unknown:
        raise ValueError(f"{where or '/'}: unsupported schema keywords {sorted(unknown)}")
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: structural_to_json_schema(sub, f"{where}/{name}", in_junctor)
                        for name, sub in value.items()}
        elif key in ("items", "not") or (key == "additionalProperties" and
                                          isinstance(value, dict)):
            out[key] = structural_to_json_schema(value, f"{where}/{key}", in_junctor or
                                                 key == "not")
        elif key in ("anyOf", "oneOf", "allOf"):
            out[key] = [structural_to_json_schema(sub, f"{where}/{key}/{i}", True)
                        for i, sub in enumerate(value)]
        elif key == "pattern":
            out[key] = go_regex_to_python(value, where)
        elif key in _KEPT:
            out[key] = value
    for bound in ("Minimum", "Maximum"):  # OpenAPI 3.0 booleans -> JSON Schema numbers
        if node.get(f"exclusive{bound}") and bound.lower() in out:
            out[f"exclusive{bound}"] = out.pop(bound.lower())
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = types + ["null"]
        if "enum" in out:
            out["enum"] = out["enum"] + [None]
    if (out.get("type") == "object" and not in_junctor and "additionalProperties" not in out and
            not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _list_type(validator, list_type, instance, schema):
    """x-kubernetes-list-type: the items of a set, the key fields of a map's items, are unique."""
    map_keys = schema.get("x-kubernetes-list-map-keys", [])
    if (not validator.is_type(instance, "array") or list_type not in ("set", "map") or
            (list_type == "map" and not map_keys)):
        return
    seen = {}
    for i, item in enumerate(instance):
        if list_type == "map":
            if not isinstance(item, dict):
                continue  # the items schema reports it
            key = json.dumps({k: item.get(k) for k in map_keys}, sort_keys=True)
        else:
            key = json.dumps(item, sort_keys=True)
        if key in seen:
            what = "key " if list_type == "map" else ""
            yield jsonschema.ValidationError(
                f"items {seen[key]} and {i} have the same {what}{key} "
                f"(x-kubernetes-list-type: {list_type})")
        seen.setdefault(key, i)


def _int_in(bits):
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return lambda x: not isinstance(x, int) or isinstance(x, bool) or low <= x <= high


def _date_time(x):
    if not isinstance(x, str):
        return True
    if not re.fullmatch(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", x):
        return False
    try:
        datetime.datetime.fromisoformat(x.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("int32")(_int_in(32))
_FORMATS.checks("int64")(_int_in(64))
_FORMATS.checks("date-time")(_date_time)

_CrdValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                             {"x-kubernetes-list-type": _list_type})


class CrdSchema:
    """The schema of one custom resource kind, read from a file that extract_crd_schema.py wrote."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            vendored = json.load(f)
        self.api_version = vendored["apiVersion"]
        self.kind = vendored["kind"]
        self.operator_version = vendored["operatorVersion"]
        schema = structural_to_json_schema(vendored["openAPIV3Schema"], "")
        # metadata is {type: object} in a CRD: the API server validates it as ObjectMeta, and so
        # does validate_object (with the Kubernetes schemas).
        schema["properties"]["metadata"] = {"type": "object"}
        _CrdValidator.check_schema(schema)
        self.validator = _CrdValidator(schema, format_checker=_FORMATS)

    def errors(self, obj):
        return [(pointer(e.absolute_path), e.message) for e in
                sorted(self.validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))]


def load_crd_schemas():
    schemas = {}
    for name in CRD_SCHEMA_FILES:
        crd = CrdSchema(os.path.join(HERE, name))
        schemas[(crd.api_version, crd.kind)] = crd
    return schemas


# --- validation ---------------------------------------------------------------------------------

def pointer(path):
    return "/" + "/".join(str(p) for p in path)


# kubernetes_validate.validate() stops at the first error; the same schema files through
# jsonschema's iter_errors report every error of a document.
_KUBERNETES_SCHEMAS = os.path.join(os.path.dirname(kubernetes_validate.__file__),
                                   "kubernetes-json-schema")


@functools.lru_cache(maxsize=None)
def _kubernetes_registry(version):
    directory = os.path.join(_KUBERNETES_SCHEMAS, f"v{version}.0-local-strict")
    if not os.path.isdir(directory):
        sys.exit(f"kubernetes-validate {metadata.version('kubernetes-validate')} has no schemas "
                 f"for Kubernetes {version} (KUBERNETES_VERSIONS)")
    with open(os.path.join(directory, "_definitions.json"), encoding="utf-8") as f:
        return directory, referencing.Resource.from_contents(json.load(f)) @ referencing.Registry()


@functools.lru_cache(maxsize=None)
def _kubernetes_validator(version, api_version, kind):
    """The validator of the strict schema of one kind, None when there is none."""
    directory, registry = _kubernetes_registry(version)
    # kubernetes-validate's file names: apps/v1 DaemonSet -> daemonset-apps-v1.json (the group's
    # domain dropped; the schema's own apiVersion and kind enums tell groups apart).
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = os.path.join(directory, f"{kind.lower()}-{group_version}.json")
    if (not re.fullmatch(r"[A-Za-z0-9]+", kind) or not re.fullmatch(r"[a-z0-9-]+", group_version)
            or not os.path.isfile(path)):
        return None
    with open(path, encoding="utf-8") as f:
        schema = json.load(f)
    return jsonschema.Draft202012Validator(
        schema, registry=referencing.Resource.from_contents(schema) @ registry)


def kubernetes_errors(obj, version):
    """[(path, message)] of obj against the strict Kubernetes schema of `version`."""
    validator = _kubernetes_validator(version, obj["apiVersion"], obj["kind"])
    if validator is None:
        return [("/", f"no schema for apiVersion {obj['apiVersion']!r}, kind {obj['kind']!r}")]
    return [(pointer(e.absolute_path), e.message) for e in
            sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))]


def validate_object(obj, crds):
    """The errors of one document, [] when it is valid: [(path, message, versions)], versions
    being the Kubernetes versions whose schema reports the error, () when it does not depend on
    the version."""
    if not isinstance(obj, dict):
        return [("/", "document is not a mapping", ())]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [("/", "apiVersion and kind must be strings", ())]
    found = {}  # (path, message) -> [versions]
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        found[("/metadata/name", "missing (every object needs a name)")] = []
    crd = crds.get((api_version, kind))
    if crd:
        for error in crd.errors(obj):
            found.setdefault(error, [])
    for version in KUBERNETES_VERSIONS:
        if crd:
            if not isinstance(meta, dict):
                continue  # reported by the CRD schema or above
            # ObjectMeta through the schema of an object that has nothing else required.
            errors = kubernetes_errors({"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": meta}, version)
        else:
            errors = kubernetes_errors(obj, version)
        for error in errors:
            found.setdefault(error, []).append(version)
    return [(path, message, tuple(versions)) for (path, message), versions in found.items()]


def format_error(error):
    path, message, versions = error
    return f"{path}: {message}" + (f" (Kubernetes {', '.join(versions)})" if versions else "")


def document_label(obj):
    if not isinstance(obj, dict):
        return "?"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return f"{obj.get('kind', '?')}/{meta.get('name', '?')}"


def manifest_files(manifest_dir):
    return sorted(f for f in os.listdir(manifest_dir)
                  if re.search(r"\.ya?ml$", f) and not re.fullmatch(r"kustomization\.ya?ml", f))


def validate_manifests(manifest_dir, crds):
    """Validates every document and prints the results; returns (documents, invalid, files)."""
    files = manifest_files(manifest_dir)
    documents = invalid = 0
    for file in files:
        with open(os.path.join(manifest_dir, file), encoding="utf-8") as f:
            text = f.read()
        try:
            objects = load_documents(text)
        except yaml.YAMLError as e:
            documents += 1
            invalid += 1
            print(f"{file} FAIL\n    {yaml_error(e)}")
            continue
        for index, obj in enumerate(objects):
            documents += 1
            errors = validate_object(obj, crds)
            print(f"{file}#{index} {document_label(obj)} {'FAIL' if errors else 'OK'}")
            for error in errors:
                print(f"    {format_error(error)}")
            invalid += bool(errors)
    return documents, invalid, files


# --- deliberate errors --------------------------------------------------------------------------

def _pod(o):
    return o["spec"]["template"]["spec"]


def _container(o):
    return _pod(o)["containers"][0]


def _endpoint(o):
    return o["spec"]["endpoints"][0]


def _rule(o):
    return o["spec"]["groups"][0]["rules"][0]


def _replace_once(text, old, new):
    if old not in text:
        raise KeyError(f"{old!r} not in the file")
    return text.replace(old, new, 1)


_C = "/spec/template/spec/containers/0"
# (what, file, kind of the document to change, change, path where it must be rejected).
# A change is a function that edits the document in place, or ("text", function of the file's
# text) for errors that only exist in YAML; their path is "YAML".
MUTATIONS = [
    ("unknown field in a container", "daemonset.yaml", "DaemonSet",
     lambda o: _container(o).update(imagePullPolcy="Always"), _C),
    ("containerPort is a string", "daemonset.yaml", "DaemonSet",
     lambda o: _container(o)["ports"][0].update(containerPort="7460"),
     f"{_C}/ports/0/containerPort"),
    ("container without a name", "daemonset.yaml", "DaemonSet",
     lambda o: _container(o).pop("name"), _C),
    ("args is a string, not a list", "daemonset.yaml", "DaemonSet",
     lambda o: _container(o).update(args="--config=/etc/baton/batond.conf"), f"{_C}/args"),
    ("probe port is neither integer nor string", "daemonset.yaml", "DaemonSet",
     lambda o: _container(o)["livenessProbe"]["httpGet"].update(port=[9460]),
     f"{_C}/livenessProbe/httpGet/port"),
    ("fieldRef without fieldPath", "daemonset.yaml", "DaemonSet",
     lambda o: _container(o)["env"][0]["valueFrom"]["fieldRef"].pop("fieldPath"),
     f"{_C}/env/0/valueFrom/fieldRef"),
    ("unknown field in a security context", "daemonset.yaml", "DaemonSet",
     lambda o: _container(o)["securityContext"].update(runAsRoot=True), f"{_C}/securityContext"),
    ("unknown field in the pod spec", "daemonset.yaml", "DaemonSet",
     lambda o: _pod(o).update(hostNetworking=True), "/spec/template/spec"),
    ("hostIPC is a string", "daemonset.yaml", "DaemonSet",
     lambda o: _pod(o).update(hostIPC="true"), "/spec/template/spec/hostIPC"),
    ("unknown field in metadata", "daemonset.yaml", "DaemonSet",
     lambda o: o["metadata"].update(label={"a": "b"}), "/metadata"),
    ("kind in the wrong case", "daemonset.yaml", "DaemonSet",
     lambda o: o.update(kind="Daemonset"), "/kind"),
    ("an apiVersion that no longer serves DaemonSets", "daemonset.yaml", "DaemonSet",
     lambda o: o.update(apiVersion="extensions/v1beta1"), "/"),
    ("object without a name", "daemonset.yaml", "DaemonSet",
     lambda o: o["metadata"].pop("name"), "/metadata/name"),
    ("ConfigMap data value is not a string", "configmap.yaml", "ConfigMap",
     lambda o: o["data"].update({"batond.conf": 1}), "/data/batond.conf"),
    ("label value is not a string", "namespace.yaml", "Namespace",
     lambda o: o["metadata"]["labels"].update(replicas=3), "/metadata/labels/replicas"),
    ("unknown top-level field", "namespace.yaml", "Namespace",
     lambda o: o.update(specs={}), "/"),
    ("Service port is a string", "service.yaml", "Service",
     lambda o: o["spec"]["ports"][0].update(port="9460"), "/spec/ports/0/port"),
    ("unknown field in a Service spec", "service.yaml", "Service",
     lambda o: o["spec"].update(clusterIp="None"), "/spec"),
    ("duplicate key", "service.yaml", "Service",
     ("text", lambda t: _replace_once(t, "  clusterIP: None\n",
                                      "  clusterIP: None\n  clusterIP: None\n")), "YAML"),
    ("mapping key that YAML 1.1 reads as a boolean", "namespace.yaml", "Namespace",
     ("text", lambda t: _replace_once(t, "  labels:\n", "  labels:\n    on: enforce\n")), "YAML"),
    ("unknown field in a ServiceMonitor endpoint", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: _endpoint(o).update(scrapeInterval="15s"), "/spec/endpoints/0"),
    ("ServiceMonitor endpoint interval is no duration", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: _endpoint(o).update(interval="15 seconds"), "/spec/endpoints/0/interval"),
    ("ServiceMonitor endpoint port is a number", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: _endpoint(o).update(port=9460), "/spec/endpoints/0/port"),
    ("relabeling action not in the enum", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: _endpoint(o)["relabelings"][0].update(action="rewrite"),
     "/spec/endpoints/0/relabelings/0/action"),
    ("namespaceSelector.matchNames is a string", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: o["spec"]["namespaceSelector"].update(matchNames="baton-system"),
     "/spec/namespaceSelector/matchNames"),
    ("unknown field in a ServiceMonitor spec", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: o["spec"].update(jobLabel_="x"), "/spec"),
    ("ServiceMonitor without a spec", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: o.pop("spec"), "/"),
    ("unknown field in a ServiceMonitor's metadata", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: o["metadata"].update(labelz={}), "/metadata"),
    ("unknown top-level field in a ServiceMonitor", "servicemonitor.yaml", "ServiceMonitor",
     lambda o: o.update(specs={}), "/"),
    ("unknown field in an alert rule", "prometheusrule.yaml", "PrometheusRule",
     lambda o: _rule(o).update(severity="critical"), "/spec/groups/0/rules/0"),
    ("alert `for` is no duration", "prometheusrule.yaml", "PrometheusRule",
     lambda o: _rule(o).update({"for": "2 minutes"}), "/spec/groups/0/rules/0/for"),
    ("alert label value is not a string", "prometheusrule.yaml", "PrometheusRule",
     lambda o: _rule(o)["labels"].update(priority=1), "/spec/groups/0/rules/0/labels/priority"),
    ("alert rule without expr", "prometheusrule.yaml", "PrometheusRule",
     lambda o: _rule(o).pop("expr"), "/spec/groups/0/rules/0"),
    ("rule group without a name", "prometheusrule.yaml", "PrometheusRule",
     lambda o: o["spec"]["groups"][0].pop("name"), "/spec/groups/0"),
    ("two rule groups of the same name", "prometheusrule.yaml", "PrometheusRule",
     lambda o: o["spec"]["groups"].append(copy.deepcopy(o["spec"]["groups"][0])), "/spec/groups"),
]


def check_mutation(manifest_dir, crds, file, kind, change, expect):
    """(True, the error) when the changed manifest is rejected at `expect`, else (False, why)."""
    with open(os.path.join(manifest_dir, file), encoding="utf-8") as f:
        text = f.read()
    stale = f"cannot be made in {file} any more: update MUTATIONS"
    try:
        if isinstance(change, tuple):
            text = change[1](text)
        objects = load_documents(text)
    except yaml.YAMLError as e:
        if expect == "YAML":
            return True, yaml_error(e)
        return False, f"unexpected YAML error: {yaml_error(e)}"
    except KeyError as e:
        return False, f"{stale} ({e})"
    if expect == "YAML":
        return False, "accepted: the YAML loaded"
    matching = [o for o in objects if isinstance(o, dict) and o.get("kind") == kind]
    if not matching:
        return False, f"{stale} (no {kind})"
    obj = copy.deepcopy(matching[0])
    try:
        change(obj)
    except (KeyError, IndexError, TypeError) as e:
        return False, f"{stale} ({e!r})"
    errors = validate_object(obj, crds)
    if not errors:
        return False, "accepted"
    at = [e for e in errors if e[0] == expect]
    if not at:
        return False, f"rejected, but not at {expect}: {'; '.join(map(format_error, errors))}"
    # Where the error depends on the version, every Kubernetes version must report it.
    for version in KUBERNETES_VERSIONS:
        if all(versions and version not in versions for _, _, versions in at):
            return False, f"accepted by Kubernetes {version}: {'; '.join(map(format_error, at))}"
    return True, format_error(at[0])


def check_mutations(manifest_dir, crds):
    """Checks every mutation and prints the results; returns how many were not rejected."""
    failed = 0
    for what, file, kind, change, expect in MUTATIONS:
        rejected, detail = check_mutation(manifest_dir, crds, file, kind, change, expect)
        failed += not rejected
        print(f"mutation {file}: {what}: {'rejected' if rejected else 'FAIL'}\n    {detail}")
    return failed


def main():
    if len(sys.argv) != 2:
        print("usage: k8s_schema_test.py MANIFEST_DIR", file=sys.stderr)
        return 2
    manifest_dir = sys.argv[1]
    crds = load_crd_schemas()
    print(f"schemas: Kubernetes {', '.join(KUBERNETES_VERSIONS)} strict (kubernetes-validate "
          f"{metadata.version('kubernetes-validate')}); " +
          ", ".join(f"{c.api_version} {c.kind}" for c in crds.values()) +
          f" (prometheus-operator {', '.join(sorted({c.operator_version for c in crds.values()}))}"
          f" CRDs, tests/deploy/schemas); jsonschema {metadata.version('jsonschema')}, "
          f"PyYAML {yaml.__version__}")
    documents, invalid, files = validate_manifests(manifest_dir, crds)
    if documents == 0:
        print(f"no manifests found in {manifest_dir}")
        return 1
    print(f"{documents} documents in {len(files)} files: {documents - invalid} valid, "
          f"{invalid} invalid")
    accepted = check_mutations(manifest_dir, crds)
    print(f"{len(MUTATIONS)} deliberate errors: {len(MUTATIONS) - accepted} rejected, "
          f"{accepted} not")
    return 0 if invalid == 0 and accepted == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
