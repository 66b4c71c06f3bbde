"""The Grafana dashboard's queries, and the metric selectors in a PromQL expression, for the
dashboard tests and the Prometheus end-to-end test (importable as tests.observability.dashboard_support)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "lahar-dashboard.json"

# Words that are PromQL syntax, not metric names.
CLAUSES = {"by", "without", "on", "ignoring", "group_left", "group_right"}  # each may take a (label, ...) list
OPERATORS = {"and", "or", "unless", "bool", "offset", "atan2"}
AGGREGATIONS = {
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
}
NUMBERS = {"inf", "nan"}
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
NUMBER = re.compile(r"(0[xX][0-9a-fA-F]+|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)(ms|[smhdwy])*")
VARIABLE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")
MATCHER = re.compile(
    r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"""
    r"""("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*,?"""
)
# Grafana's template variables with a placeholder value each, to run a query as Prometheus.
GRAFANA_VALUES = {
    "node": ".*",
    "queue": ".*",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "datasource": "prometheus",
}


class PromQLError(ValueError):
    pass


@dataclass(frozen=True)
class Selector:
    """A metric named in an expression, with its label matchers."""

    metric: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, operator, value)

    def label(self, name: str) -> tuple[str, str] | None:
        for label, operator, value in self.matchers:
            if label == name:
                return operator, value
        return None


def _skip_string(expr: str, start: int) -> int:
    quote = expr[start]
    index = start + 1
    while index < len(expr):
        if expr[index] == "\\" and quote != "`":
            index += 2
            continue
        if expr[index] == quote:
            return index + 1
        index += 1
    raise PromQLError(f"unterminated string at {start} in {expr!r}")


def _closing(expr: str, start: int, opening: str, closing: str) -> int:
    """The index just past the bracket that closes the one at `start` (strings skipped)."""
    depth = 0
    index = start
    while index < len(expr):
        char = expr[index]
        if char in "\"'`":
            index = _skip_string(expr, index)
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    raise PromQLError(f"unbalanced {opening} at {start} in {expr!r}")


def _matchers(text: str) -> tuple[tuple[str, str, str], ...]:
    """`label="v", other=~"x"` -> ((label, =, v), (other, =~, x))."""
    found = []
    position = 0
    body = text.strip()
    while position < len(body):
        match = MATCHER.match(body, position)
        if match is None:
            raise PromQLError(f"cannot read label matchers {text!r}")
        label, operator, quoted = match.groups()
        found.append((label, operator, quoted[1:-1]))
        position = match.end()
    return tuple(found)


def _next_char(expr: str, index: int) -> tuple[str, int]:
    while index < len(expr) and expr[index].isspace():
        index += 1
    return (expr[index] if index < len(expr) else ""), index


def selectors(expr: str) -> list[Selector]:
    """Every metric selector in a PromQL expression: function and aggregation names, keywords,
    label lists of by/without/on/ignoring/group_*, label matchers, strings, numbers, durations,
    ranges and Grafana's $variables are not metric names. `{__name__="x"}` names x."""
    found: list[Selector] = []
    index = 0
    while index < len(expr):
        char = expr[index]
        if char.isspace():
            index += 1
        elif char in "\"'`":
            index = _skip_string(expr, index)
        elif char == "$":
            match = VARIABLE.match(expr, index)
            if match is None:
                raise PromQLError(f"stray $ at {index} in {expr!r}")
            index = match.end()
        elif char == "[":
            index = _closing(expr, index, "[", "]")
        elif char == "{":  # a selector without a leading name
            end = _closing(expr, index, "{", "}")
            matchers = _matchers(expr[index + 1 : end - 1])
            names = [value for label, operator, value in matchers if label == "__name__" and operator == "="]
            if not names:
                raise PromQLError(f"a selector without a metric name in {expr!r}")
            found.append(Selector(names[0], tuple(m for m in matchers if m[0] != "__name__")))
            index = end
        elif char.isdigit() or (char == "." and index + 1 < len(expr) and expr[index + 1].isdigit()):
            match = NUMBER.match(expr, index)
            assert match is not None
            index = match.end()
        elif IDENTIFIER.match(expr, index):
            match = IDENTIFIER.match(expr, index)
            assert match is not None
            word = match.group()
            index = match.end()
            following, after = _next_char(expr, index)
            lowered = word.lower()
            if lowered in CLAUSES:
                if following == "(":
                    index = _closing(expr, after, "(", ")")
            elif lowered in OPERATORS or lowered in NUMBERS or lowered in AGGREGATIONS:
                continue
            elif following == "(":
                continue  # a function: its arguments are read next
            else:
                matchers: tuple[tuple[str, str, str], ...] = ()
                if following == "{":
                    end = _closing(expr, after, "{", "}")
                    matchers = _matchers(expr[after + 1 : end - 1])
                    index = end
                found.append(Selector(word, matchers))
        else:
            index += 1
    return found


def metric_names(expr: str) -> set[str]:
    return {selector.metric for selector in selectors(expr)}


def variable_query_expression(query: str) -> str | None:
    """The PromQL inside a Grafana Prometheus variable query, or None when it names no metric:
    `label_values(expr, label)` -> expr, `query_result(expr)` -> expr."""
    query = query.strip()
    match = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", query, re.S)
    if match:
        return match.group(1)
    if re.fullmatch(r"label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)|label_names\(\s*\)|metrics\(.*\)", query):
        return None
    match = re.fullmatch(r"query_result\((.*)\)", query, re.S)
    if match:
        return match.group(1)
    raise PromQLError(f"unknown variable query {query!r}")


def with_grafana_values(expr: str, overrides: dict[str, str] | None = None) -> str:
    """The expression with Grafana's variables replaced by values Prometheus accepts."""
    values = {**GRAFANA_VALUES, **(overrides or {})}

    def value(match: re.Match[str]) -> str:
        name = match.group().strip("${}").split(":")[0]
        if name not in values:
            raise PromQLError(f"unknown Grafana variable {match.group()} in {expr!r}")
        return values[name]

    return VARIABLE.sub(value, expr)


# --- the dashboard ----------------------------------------------------------------------------------


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    return json.loads(path.read_text())


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels of collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and every variable query."""
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel.get('id')} {panel.get('title')!r} target {target.get('refId')}", target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            expression = variable_query_expression(text)
            if expression is not None:
                yield f"variable {variable['name']}", expression
