"""PromQL and Grafana-dashboard helpers shared by the deploy tests (standard library only).

- promql_metric_names(expr): the metric names an expression reads (a lexical approximation).
- iter_panels(dashboard): every panel, rows' nested panels included.
- dashboard_queries(dashboard): (where, expr) for every panel target and query variable.
- substitute(expr, names): Grafana variables replaced by values Prometheus can evaluate.
- to_bool_comparison(expr): `a > b` at the top level turned into `a > bool b`.
"""

import re

PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                   "group_left", "group_right", "inf", "nan"}

# Grafana's global variables and the values the tests give them when they evaluate a query
# outside Grafana: a 1m rate window (4 x a 15 s scrape interval, what $__rate_interval comes to
# by default) and a 5m dashboard range.
GRAFANA_BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "5m",
    "__range_s": "300",
    "__range_ms": "300000",
}

_VARIABLE = re.compile(r"\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]"
                       r"|\$([A-Za-z0-9_]+)")


def promql_metric_names(expr):
    """Metric names in a PromQL expression: identifiers that are neither functions, keywords,
    label names (inside {...} or by/without/on/ignoring/group_x (...)) nor in strings."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("("):
            continue  # function or aggregation
        if word.lower() in PROMQL_KEYWORDS:
            continue
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] in ".$"):
            continue  # duration or number suffix such as 5m, 1e3; a Grafana $variable
        names.add(word)
    return names


def iter_panels(dashboard):
    """Every panel of a dashboard, depth first; rows' nested (collapsed) panels included."""
    for panel in dashboard.get("panels") or []:
        yield panel
        yield from iter_panels(panel)


def variable_query(variable):
    """The PromQL a query variable runs, or None for a form this module does not translate.
    label_values(SELECTOR, LABEL) -> count by (LABEL) (SELECTOR); query_result(EXPR) -> EXPR."""
    query = variable.get("query")
    if isinstance(query, dict):
        query = query.get("query")
    if not isinstance(query, str):
        return None
    query = query.strip()
    m = re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)", query, re.S)
    if m:
        return f"count by ({m.group(2)}) ({m.group(1).strip()})"
    m = re.fullmatch(r"query_result\((.*)\)", query, re.S)
    if m:
        return m.group(1).strip()
    return None


def dashboard_queries(dashboard):
    """(where, expr) for every panel target with an expr and every query variable; expr is
    None for a variable query variable_query() cannot translate."""
    out = []
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") == "query":
            out.append((f"variable ${variable.get('name')}", variable_query(variable)))
    for panel in iter_panels(dashboard):
        for target in panel.get("targets") or []:
            if "expr" in target:
                out.append((f"panel {panel.get('title')!r} {target.get('refId', '?')}",
                            target["expr"]))
    return out


def referenced_variables(expr):
    """Names of the Grafana variables an expression uses ($x, ${x}, ${x:fmt}, [[x]])."""
    return {a or b or c for a, b, c in _VARIABLE.findall(expr)}


def substitute(expr, multi_value_names):
    """Replaces Grafana's global variables by GRAFANA_BUILTINS and each dashboard variable in
    multi_value_names by `.*` (what "All" means for a regex matcher); leaves others alone."""

    def replace(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in GRAFANA_BUILTINS:
            return GRAFANA_BUILTINS[name]
        if name in multi_value_names:
            return ".*"
        return m.group(0)

    return _VARIABLE.sub(replace, expr)


def to_bool_comparison(expr):
    """Returns (expr', changed): each comparison outside parentheses, braces, brackets and
    strings that lacks `bool` gets it, so that a filter (`x > 0`, empty while healthy) becomes
    a 0/1 series for every input series."""
    out = []
    depth = 0
    quote = None
    changed = False
    i = 0
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == "\\" and i + 1 < len(expr):
                out.append(expr[i + 1])
                i += 2
                continue
            if c == quote:
                quote = None
            i += 1
            continue
        if c in "\"'`":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            op = next((o for o in ("==", "!=", ">=", "<=", ">", "<") if expr.startswith(o, i)),
                      None)
            if op is not None:
                out.append(op)
                i += len(op)
                if not re.match(r"\s*bool\b", expr[i:]):
                    out.append(" bool")
                    changed = True
                continue
        out.append(c)
        i += 1
    return "".join(out), changed
