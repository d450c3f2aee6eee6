#!/usr/bin/env python3
"""Checks every #include of the sources against the layer rule of docs/architecture.md.

Usage: check_layers.py [--root DIR]

The rule is the table under "### The layer rule" in docs/architecture.md, read from there on
every run (the document is the only copy of the rule):

  - the first cell of a row names a directory (`collective/`: every source below it) or files
    (`daemon/metrics.cc`, `python/src/c10d_*`); a file's row is the longest directory row that
    holds it, plus every file row that matches it;
  - every other cell lists what those files may include: a backticked token that ends in `/`
    allows everything below it, one that ends in `.h` or `.hpp` allows that one file, and any
    other word is prose. Project paths are relative to the repository root; `baton/...` is
    `client/include/baton/...` where that exists (else, as `baton/v1/`, the generated proto).

Every `#include "..."` of a checked file must be allowed. An include found next to the including
file (`#include "tcp/socket.h"` in transport/) is that file, as the compiler resolves it. An
`#include <...>` is checked only when the table names its first path component (a project
directory or a library such as `grpcpp/` or `hwloc.h`): the standard library and the system's
headers are not in the table.

The bullets under "Known exceptions" (`including/file.cc` → `included/file.h`, more targets
separated by commas) are violations the rule tolerates for now. One that no longer occurs fails
the check too, so the list only shrinks.

Prints one line per violation, `file:line: includes "x", which <row> may not include (allowed:
...)`, and exits 1; else prints one summary line and exits 0. Exits 2 if the document cannot be
read as a rule. Needs only Python's standard library.
"""

import argparse
import fnmatch
import os
import re
import sys

DOC = os.path.join("docs", "architecture.md")
RULE_HEADING = "### The layer rule"
EXCEPTIONS_HEADING = "known exceptions"
SOURCE_SUFFIXES = (".h", ".hpp", ".hh", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".inc")
# Directories never checked even below a table row: build trees, vendored and generated code.
SKIP_DIR_PREFIXES = ("build", ".", "_deps", "__pycache__")
SKIP_DIRS = {"third_party", "third-party", "vendor", "generated", "node_modules"}

TOKEN_RE = re.compile(r"`([^`]+)`")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
ARROW_RE = re.compile(r"\s*(?:→|->)\s*")


class RuleError(Exception):
    """The document does not state a rule this script can read."""


class Row:
    """One row of the table: whose files it covers and what they may include."""

    def __init__(self, key, allowed):
        self.key = key  # `dir/` or a file pattern
        self.allowed = allowed  # normalised tokens, in the table's order

    @property
    def is_dir(self):
        return self.key.endswith("/")

    def covers(self, path):
        if self.is_dir:
            return path.startswith(self.key)
        return fnmatch.fnmatchcase(path, self.key)


def public_header_path(root, path):
    """`baton/x` as the repository holds it (client/include/baton/x), if it does."""
    if path == "baton" or path.startswith("baton/"):
        candidate = "client/include/" + path
        full = os.path.join(root, candidate)
        if os.path.exists(full) or os.path.exists(full.rstrip("/") + ".in"):
            return candidate
    return path


def is_rule_token(token):
    return token.endswith("/") or token.endswith(".h") or token.endswith(".hpp")


def cells(line):
    stripped = line.strip()
    if not stripped.startswith("|"):
        return None
    return [cell.strip() for cell in stripped.strip("|").split("|")]


def parse_doc(root):
    """Returns (rows, exceptions) from the document; exceptions: {(file, target): line}."""
    doc_path = os.path.join(root, DOC)
    try:
        with open(doc_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise RuleError("cannot read %s: %s" % (doc_path, e))

    start = next((i for i, l in enumerate(lines) if l.strip() == RULE_HEADING), None)
    if start is None:
        raise RuleError('%s has no heading "%s"' % (DOC, RULE_HEADING))
    i = start + 1
    while i < len(lines) and cells(lines[i]) is None:
        if lines[i].startswith("#"):
            raise RuleError("%s: no table under %s" % (DOC, RULE_HEADING))
        i += 1
    rows = []
    header = True
    for i in range(i, len(lines)):
        row_cells = cells(lines[i])
        if row_cells is None:
            break
        if header or set(lines[i].strip()) <= set("|-: "):
            header = False
            continue
        keys = TOKEN_RE.findall(row_cells[0])
        if len(keys) != 1:
            raise RuleError("%s:%d: the first cell must name one directory or file pattern"
                            % (DOC, i + 1))
        key = public_header_path(root, keys[0])
        allowed = []
        for cell in row_cells[1:]:
            for token in TOKEN_RE.findall(cell):
                if is_rule_token(token):
                    allowed.append(public_header_path(root, token))
        if any(r.key == key for r in rows):
            raise RuleError("%s:%d: a second row for %s" % (DOC, i + 1, key))
        rows.append(Row(key, allowed))
    if not rows:
        raise RuleError("%s: the table under %s has no rows" % (DOC, RULE_HEADING))
    end = i

    exceptions = {}
    heading = next((j for j in range(end, len(lines))
                    if lines[j].startswith("#") and EXCEPTIONS_HEADING in lines[j].lower()),
                   None)
    if heading is None:
        return rows, exceptions
    bullets = []  # [index of its first line, its text with its continuation lines]
    continuing = False
    for j in range(heading + 1, len(lines)):
        line = lines[j]
        if line.startswith("#"):
            break
        if re.match(r"[-*] ", line):
            bullets.append([j, line[2:]])
            continuing = True
        elif continuing and line.startswith("  ") and line.strip():
            bullets[-1][1] += " " + line.strip()
        else:
            continuing = False
    for j, line in bullets:
        parts = ARROW_RE.split(line, maxsplit=1)
        sources = TOKEN_RE.findall(parts[0])
        # The targets end where the bullet's prose begins, at the first colon.
        targets = TOKEN_RE.findall(parts[1].split(":", 1)[0]) if len(parts) == 2 else []
        if len(sources) != 1 or not targets:
            raise RuleError("%s:%d: an exception reads `including/file` → `included/file.h`"
                            % (DOC, j + 1))
        for target in targets:
            exceptions[(sources[0], public_header_path(root, target))] = j + 1
    return rows, exceptions


def row_for(rows, path):
    """The allowed tokens for `path` and the row key named in messages, or None if unchecked."""
    dirs = [r for r in rows if r.is_dir and r.covers(path)]
    files = [r for r in rows if not r.is_dir and r.covers(path)]
    if not dirs and not files:
        return None
    allowed = []
    names = []
    if dirs:
        best = max(dirs, key=lambda r: len(r.key))
        allowed.extend(best.allowed)
        names.append(best.key)
    for r in files:
        allowed.extend(t for t in r.allowed if t not in allowed)
        names.append(r.key)
    return " + ".join(names), allowed


def is_allowed(target, allowed):
    return any(target.startswith(t) if t.endswith("/") else target == t for t in allowed)


def checked_files(root, rows):
    """Source files below the table's directories and its file patterns, sorted."""
    found = set()
    tops = {r.key.split("/", 1)[0] for r in rows}
    for top in sorted(tops):
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames
                           if not d.startswith(SKIP_DIR_PREFIXES) and d not in SKIP_DIRS]
            for name in filenames:
                if name.endswith(SOURCE_SUFFIXES):
                    rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                    if row_for(rows, rel) is not None:
                        found.add(rel)
    return sorted(found)


def includes(root, path):
    """(line number, '<' or '"', written path) of every #include outside comments."""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    # Blank out block comments, keeping line numbers.
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    for number, line in enumerate(text.splitlines(), 1):
        m = INCLUDE_RE.match(line)
        if m:
            yield number, m.group(1), m.group(2).strip()


def resolve(root, path, kind, written):
    """What an include names: a repository path where it is one, else the path as written."""
    if kind == '"':
        here = os.path.dirname(path)
        beside = os.path.normpath(os.path.join(here, written)).replace(os.sep, "/")
        if here and (os.path.isfile(os.path.join(root, beside))
                     or os.path.isfile(os.path.join(root, beside + ".in"))):
            return beside
    return public_header_path(root, written)


def check(root):
    """Returns (problems, summary): problem lines, and the summary line of a clean run."""
    rows, exceptions = parse_doc(root)
    # Names the table knows: an #include <...> is checked only when its first component is one.
    known = set()
    for r in rows:
        known.add(r.key.split("/", 1)[0])
        for t in r.allowed:
            known.add(t.split("/", 1)[0])
    files = checked_files(root, rows)
    problems = []
    used = set()
    count = 0
    for path in files:
        key, allowed = row_for(rows, path)
        for number, kind, written in includes(root, path):
            target = resolve(root, path, kind, written)
            if kind == "<" and target.split("/", 1)[0] not in known:
                continue
            count += 1
            if is_allowed(target, allowed):
                continue
            if (path, target) in exceptions:
                used.add((path, target))
                continue
            shown = written if target == written else "%s (%s)" % (written, target)
            problems.append('%s:%d: includes "%s", which %s may not include (allowed: %s)'
                            % (path, number, shown, key, ", ".join(allowed) or "nothing"))
    for (source, target), line in sorted(exceptions.items(), key=lambda e: e[1]):
        if (source, target) not in used:
            problems.append("%s:%d: the known exception %s → %s no longer occurs (or the table "
                            "allows it): remove it from the list" % (DOC, line, source, target))
    summary = ("layer rule: %d files and %d includes checked against %s, %d known exceptions "
               "in use" % (len(files), count, DOC, len(used)))
    return problems, summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), os.pardir),
                        help="the repository (default: the one holding this script)")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    try:
        problems, summary = check(root)
    except RuleError as e:
        print("check_layers: %s" % e, file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    if problems:
        print("layer rule: %d problem(s); the rule is the table under \"%s\" in %s"
              % (len(problems), RULE_HEADING[4:], DOC), file=sys.stderr)
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
