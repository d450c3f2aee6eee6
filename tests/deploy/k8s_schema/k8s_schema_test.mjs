#!/usr/bin/env node
// Validates every document of every deploy/k8s/*.yaml (kustomization.yaml excepted: it is
// kustomize's input, not a Kubernetes object) against the Kubernetes OpenAPI schemas and the
// prometheus-operator CRD schemas, offline.
//
// Usage: node k8s_schema_test.mjs MANIFEST_DIR
//
// The schemas come as validators generated from the upstream specs by the npm packages pinned in
// package.json / package-lock.json beside this file (installed by scripts/setup_node_tools.sh,
// never at test time): kubernetes-models (the Kubernetes OpenAPI spec) and
// @kubernetes-models/prometheus-operator (the CRDs of a prometheus-operator release). They check
// types, required fields, enums, patterns and formats.
//
// Strict like `kubectl apply --validate=strict`: a field that the schema does not define is an
// error. The upstream schemas leave additionalProperties open, so the generated validators accept
// unknown fields; this script runs each validator on a Proxy of the document that records which
// fields the validator looked up. A validator reads every property its schema declares (present
// or not) and every key of a map (labels, ConfigMap data, ...), so a key that it never read is
// not in the schema. An object whose keys it never read at all has a free-form schema
// (x-kubernetes-preserve-unknown-fields) and is left alone.
//
// YAML is read as YAML 1.1, like the Go YAML library Kubernetes uses (`on`, `yes`: booleans);
// duplicate keys are errors.
//
// Prints one line per document, "<file>#<n> <Kind>/<name> OK" or "... FAIL" followed by one
// indented line per error, then a summary. Exits 0 when every document is valid, 1 otherwise, 77
// (skip) when the packages are not installed.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const packageJson = JSON.parse(fs.readFileSync(path.join(here, "package.json"), "utf8"));
// Where the model classes of a group/version live, first match wins.
const MODEL_PACKAGES = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];

function installedVersion(name) {
  const file = path.join(here, "node_modules", name, "package.json");
  return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")).version : null;
}

const missing = [...MODEL_PACKAGES, "yaml"].filter((name) => installedVersion(name) === null);
if (missing.length > 0) {
  console.log(`SKIP: ${missing.join(", ")} not installed in ${here}/node_modules ` +
              "(run scripts/setup_node_tools.sh)");
  process.exit(77);
}
const YAML = (await import("yaml")).default;

if (process.argv.length !== 3) {
  console.error("usage: k8s_schema_test.mjs MANIFEST_DIR");
  process.exit(2);
}
const manifestDir = process.argv[2];

for (const name of MODEL_PACKAGES) {
  const source = packageJson.schemaSources?.[name] ?? "";
  console.log(`schemas: ${name} ${installedVersion(name)}${source ? ` (${source})` : ""}`);
}

// The model class for apiVersion/kind, or an error string.
async function modelClass(apiVersion, kind) {
  if (!/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion) ||
      !/^[A-Z][A-Za-z0-9]*$/.test(kind)) {
    return `no schema for apiVersion ${JSON.stringify(apiVersion)}, kind ${JSON.stringify(kind)}`;
  }
  for (const pkg of MODEL_PACKAGES) {
    let mod;
    try {
      mod = await import(`${pkg}/${apiVersion}/${kind}`);
    } catch (e) {
      if (e.code === "ERR_MODULE_NOT_FOUND" || e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED") continue;
      throw e;
    }
    const cls = mod[kind];
    // Types that are only embedded in objects (v1/Container, ...) have no apiVersion/kind.
    if (cls && cls.apiVersion === apiVersion && cls.kind === kind) return cls;
  }
  return `no schema for ${apiVersion} ${kind} in ${MODEL_PACKAGES.join(", ")}`;
}

// Returns a Proxy of a deep copy of `value` that records, for every object in it, which keys
// were read; `records` receives one {path, keys, read, enumerated} per object.
function tracked(value, where, records) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v, i) => tracked(v, `${where}/${i}`, records));
  const record = { path: where, keys: Object.keys(value), read: new Set(), enumerated: false };
  records.push(record);
  const copy = {};
  for (const [k, v] of Object.entries(value)) copy[k] = tracked(v, `${where}/${k}`, records);
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.get(target, key, receiver);
    },
    has(target, key) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.has(target, key);
    },
    ownKeys(target) {
      record.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

function describe(error) {
  const where = error.instancePath || "/";
  let message = error.message ?? error.keyword;
  if (error.keyword === "enum") {
    message += `: ${error.params.allowedValues.map((v) => JSON.stringify(v)).join(", ")}`;
  }
  if (error.keyword === "required") {
    message = `missing required field "${error.params.missingProperty}"`;
  }
  return `${where}: ${message}`;
}

// The errors of one document (an empty list when it is valid).
async function validateObject(object) {
  if (object === null || typeof object !== "object" || Array.isArray(object)) {
    return ["document is not a mapping"];
  }
  const errors = [];
  const { apiVersion, kind } = object;
  if (typeof apiVersion !== "string" || typeof kind !== "string") {
    return ["apiVersion and kind must be strings"];
  }
  if (typeof object.metadata?.name !== "string" || object.metadata.name === "") {
    errors.push("/metadata/name: missing (every object needs a name)");
  }
  const cls = await modelClass(apiVersion, kind);
  if (typeof cls === "string") return [...errors, cls];

  const records = [];
  const proxy = tracked(object, "", records);
  try {
    // Model.prototype.validate runs the generated validator on `this` and throws on failure.
    cls.prototype.validate.call(proxy);
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    errors.push(...e.errors.map(describe));
  }
  for (const record of records) {
    if (record.read.size === 0 && !record.enumerated) continue;  // free-form object
    for (const key of record.keys) {
      if (!record.read.has(key)) errors.push(`${record.path}/${key}: unknown field`);
    }
  }
  return errors;
}

const files = fs.readdirSync(manifestDir)
    .filter((f) => /\.ya?ml$/.test(f) && !/^kustomization\.ya?ml$/.test(f))
    .sort();
let passed = 0;
let failed = 0;
for (const file of files) {
  const text = fs.readFileSync(path.join(manifestDir, file), "utf8");
  const documents = YAML.parseAllDocuments(text, { version: "1.1", uniqueKeys: true });
  let index = 0;
  for (const document of documents) {
    const label = `${file}#${index++}`;
    let errors = [...document.errors, ...document.warnings]
        .map((e) => `YAML: ${e.message.split("\n")[0].replace(/:$/, "")}`);
    let name = "?";
    if (errors.length === 0) {
      const object = document.toJS({ maxAliasCount: 100 });
      if (object === null || object === undefined) {  // empty document ("---" at the end)
        index--;
        continue;
      }
      name = `${object.kind ?? "?"}/${object.metadata?.name ?? "?"}`;
      errors = await validateObject(object);
    }
    if (errors.length === 0) {
      passed++;
      console.log(`${label} ${name} OK`);
    } else {
      failed++;
      console.log(`${label} ${name} FAIL`);
      for (const error of errors) console.log(`    ${error}`);
    }
  }
}
if (passed + failed === 0) {
  console.log(`no manifests found in ${manifestDir}`);
  process.exit(1);
}
console.log(`${passed + failed} documents in ${files.length} files: ` +
            `${passed} valid, ${failed} invalid`);
process.exit(failed === 0 ? 0 : 1);
