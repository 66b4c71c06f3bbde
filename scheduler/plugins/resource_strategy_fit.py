"""resource-strategy-fit: per resource, favour fuller (`MostAllocated`) or emptier
(`LeastAllocated`) nodes, each with its weight (Volcano's resource-strategy-fit plugin and formula).

For each resource the pod asks for that the configuration names (exactly, or by a prefix pattern
such as `nvidia.com/*`; the longest prefix wins): `MostAllocated` scores `(used + request) /
allocatable × weight`, `LeastAllocated` `(allocatable − used − request) / allocatable × weight`.
The sum is divided by the summed weights, then × 100 × `resourceStrategyFitWeight`. A node where a
scored resource would be overcommitted scores 0. A pod may choose for itself with the annotations
`volcano.sh/resource-strategy-scoring-type` (`MostAllocated` / `LeastAllocated`) and
`volcano.sh/resource-strategy-weight` (JSON, resource -> weight): only the resources named there
are scored then.

Two sub-policies keep scarce devices for the pods that need them (Volcano's `sra` and
`proportional`):

- `sra` (scarce resource avoidance), a score added to the above: a node lacking anything the pod
  asks for scores 0; otherwise `(1 − Σ weight of the listed resources the node has / Σ listed
  weights) × 100 × sra weight`, so pods that need no GPU go first to nodes without GPUs.
- `proportional`, a predicate: a pod that asks for none of the listed resources may take a node
  only if the node's idle cpu and memory after it still cover, for each listed resource the node
  has, `idle amount × cpu rate` cores and `idle amount × memory rate` GB (10^9 bytes, as
  Volcano), so every idle GPU keeps the cpu and memory to be used.

Arguments: `resourceStrategyFitWeight` (10), `resources` (resource -> `{type, weight}`; cpu and
memory `LeastAllocated` weight 1 when not given), `sra` (`{enable, resources: "a, b", weight,
resourceWeight: {resource: weight}}`, a listed resource's weight 1 unless given, the policy's
weight 1 unless given), `proportional` (`{enable, resources: "a, b", resourceProportion:
{"<resource>.cpu": rate, "<resource>.memory": rate}}`, rates 1 unless given). A bad type, weight,
pattern or rate refuses the configuration (Volcano falls back to defaults silently, or drops the
entry).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lahar.scheduler.framework.plugin import Arguments, Plugin, boolean, number, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import CPU, MEMORY, PODS, NodeTable, Rows, TaskInfo, TaskStatus

MAX_SCORE = 100.0
MOST, LEAST = "MostAllocated", "LeastAllocated"
SCORING_TYPE = "volcano.sh/resource-strategy-scoring-type"
SCORING_WEIGHT = "volcano.sh/resource-strategy-weight"
DEFAULT_RESOURCES = {"cpu": (LEAST, 1.0), "memory": (LEAST, 1.0)}
Strategy = tuple[str, float]  # (type, weight)


def _strategy(value: Any, where: str) -> Strategy:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be a mapping with type and weight, not {value!r}")
    kind = value.get("type", LEAST)
    if kind not in (MOST, LEAST):
        raise ValueError(f"{where}.type must be {MOST} or {LEAST}, not {kind!r}")
    weight = number(minimum=0)(value.get("weight", 1))
    return str(kind), weight or 1.0  # Volcano: a weight of 0 counts as 1


def resources_argument(value: Any) -> dict[str, Strategy]:
    """`resources`: resource name (or `prefix*`) -> (type, weight)."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"must be a mapping of resource -> {{type, weight}}, not {value!r}")
    parsed = {}
    for name, strategy in value.items():
        name = str(name)
        if "*" in name and (name == "*" or not name.endswith("*") or name.count("*") != 1):
            raise ValueError(f"{name!r}: a pattern is a prefix followed by one '*'")
        parsed[name] = _strategy(strategy, name)
    return parsed


def configured_strategy(name: str, resources: Mapping[str, Strategy]) -> Strategy | None:
    """The strategy for a resource: its own entry, else the longest matching `prefix*` pattern."""
    if name in resources:
        return resources[name]
    best: tuple[int, Strategy] | None = None
    for pattern, strategy in resources.items():
        prefix = pattern[:-1] if pattern.endswith("*") else None
        if prefix is not None and name.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), strategy)
    return None if best is None else best[1]


def _listed(value: Any, where: str) -> list[str]:
    """`resources` of a sub-policy: Volcano's comma-separated string (or a list), blanks dropped."""
    if isinstance(value, str):
        names = [name.strip() for name in value.split(",")]
    elif isinstance(value, list) and all(isinstance(name, str) for name in value):
        names = [name.strip() for name in value]
    else:
        raise ValueError(f"{where}: must be a comma-separated string of resource names, not {value!r}")
    return [name for name in names if name]


def _sub_policy(value: Any, fields: tuple[str, ...]) -> Mapping[str, Any] | None:
    """A sub-policy mapping with only `fields` (and `enable`); None when it is not enabled."""
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a mapping, not {value!r}")
    unknown = sorted(set(map(str, value)) - {"enable", *fields})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)} (accepted: enable, {', '.join(fields)})")
    return value if boolean(value.get("enable", False)) else None


@dataclass(frozen=True)
class Sra:
    """The `sra` policy: its weight and each listed resource's weight (`weight_sum` over all)."""

    weight: float
    resources: Mapping[str, float]

    @property
    def weight_sum(self) -> float:
        return sum(self.resources.values())


def sra_argument(value: Any) -> Sra | None:
    policy = _sub_policy(value, ("resources", "weight", "resourceWeight"))
    if policy is None:
        return None
    names = _listed(policy.get("resources", ""), "resources")
    given = policy.get("resourceWeight") or {}
    if not isinstance(given, Mapping):
        raise ValueError(f"resourceWeight: must be a mapping of resource -> weight, not {given!r}")
    stray = sorted(set(map(str, given)) - set(names))
    if stray:
        raise ValueError(f"resourceWeight names {', '.join(stray)}, not listed in resources")
    weights = {name: number(minimum=0)(given.get(name, 1)) for name in names}
    return Sra(number(minimum=0)(policy.get("weight", 1)), weights)


Proportion = tuple[float, float]  # cores and GB to keep per idle unit of the resource


def proportional_argument(value: Any) -> dict[str, Proportion] | None:
    policy = _sub_policy(value, ("resources", "resourceProportion"))
    if policy is None:
        return None
    names = _listed(policy.get("resources", ""), "resources")
    given = policy.get("resourceProportion") or {}
    if not isinstance(given, Mapping):
        raise ValueError(f"resourceProportion: must be a mapping of <resource>.cpu|memory -> rate, not {given!r}")
    keys = {f"{name}.{kind}" for name in names for kind in (CPU, MEMORY)}
    stray = sorted(set(map(str, given)) - keys)
    if stray:
        raise ValueError(f"resourceProportion: {', '.join(stray)} is not <listed resource>.cpu or .memory")
    return {
        name: (number(minimum=0)(given.get(f"{name}.{CPU}", 1)), number(minimum=0)(given.get(f"{name}.{MEMORY}", 1)))
        for name in names
    }


@register_plugin
class ResourceStrategyFitPlugin(Plugin):
    name = "resource-strategy-fit"
    ARGUMENTS: ClassVar[Arguments] = {
        "resourceStrategyFitWeight": number(minimum=0),
        "resources": resources_argument,
        "sra": sra_argument,
        "proportional": proportional_argument,
    }

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.weight = self.argument("resourceStrategyFitWeight", 10.0)
        self.resources: dict[str, Strategy] = self.argument("resources", DEFAULT_RESOURCES)
        allocatable = session.nodes.allocatable.astype(np.float64)
        self._inverse = np.divide(1.0, allocatable, out=np.zeros_like(allocatable), where=allocatable > 0)
        self._plans: dict[Hashable, tuple[np.ndarray, np.ndarray, np.ndarray] | None] = {}
        self.sra: Sra | None = self.argument("sra", None)
        self._sra_scores: dict[Hashable, np.ndarray] = {}
        proportional: dict[str, Proportion] = self.argument("proportional", None) or {}
        # Only the listed resources some node has can hold anything back.
        column = session.resources.column
        self._kept = [(column[name], rates) for name, rates in proportional.items() if name in column]
        self._cpu, self._memory = column[CPU], column[MEMORY]
        if self._kept:
            session.add_predicate_fn(self.proportional, self.explain_proportional, applies=self._asks_no_kept)
        if self.sra is not None and not (self.sra.weight and self.sra.weight_sum):
            self.sra = None  # scores 0 everywhere (Volcano: a weight sum of 0 leaves 0)
        if not self.weight and self.sra is None:
            return
        session.add_node_order_fn(self.score_with_sra if self.sra is not None else self.score)
        # The pod's own choice is in annotations, outside its placement class: only then does
        # the score depend on them, so the key grows only in sessions with such pods.
        if any(
            SCORING_TYPE in task.pod.meta.annotations
            for job in session.jobs.values()
            for task in job.by_status.get(TaskStatus.PENDING, {}).values()
        ):
            session.add_class_key_fn(self._annotations)

    @staticmethod
    def _annotations(task: TaskInfo) -> Hashable:
        notes = task.pod.meta.annotations
        return (notes.get(SCORING_TYPE), notes.get(SCORING_WEIGHT))

    def _plan(self, task: TaskInfo) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The scored columns, their weights (scaled to 0–100 × the plugin's weight) and which
        are MostAllocated; None when the pod asks for nothing scored."""
        key = (task.placement, self._annotations(task))
        if key in self._plans:
            return self._plans[key]
        names = self.session.resources.names
        annotations = task.pod.meta.annotations
        pod_type = annotations.get(SCORING_TYPE)
        pod_weights: Mapping[str, Any] = {}
        if pod_type is not None:
            try:
                loaded = json.loads(annotations.get(SCORING_WEIGHT) or "")
                pod_weights = loaded if isinstance(loaded, Mapping) else {}
            except ValueError:
                pod_weights = {}  # Volcano scores such a pod 0
        columns, weights, most = [], [], []
        for column in np.flatnonzero(task.request > 0):
            name = names[column]
            if name == PODS:
                continue
            if pod_type is not None:
                weight = pod_weights.get(name)
                if not isinstance(weight, (int, float)) or pod_type not in (MOST, LEAST):
                    continue
                strategy: Strategy | None = (pod_type, float(weight))
            else:
                strategy = configured_strategy(name, self.resources)
            if strategy is None or not strategy[1]:
                continue
            columns.append(column)
            weights.append(strategy[1])
            most.append(strategy[0] == MOST)
        plan = None
        if columns:
            scaled = np.array(weights) * (MAX_SCORE * self.weight / sum(weights))
            plan = (np.array(columns, dtype=np.intp), scaled, np.array(most))
        self._plans[key] = plan
        return plan

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        plan = self._plan(task)
        if plan is None:
            return np.zeros(len(nodes.schedulable[rows]), dtype=np.float64)
        columns, weights, most = plan
        used = nodes.used[rows][:, columns] + nodes.be_used[rows][:, columns] + task.request[columns]
        allocatable = nodes.allocatable[rows][:, columns]
        has = allocatable > 0  # Volcano: a resource the node has none of scores 0, and is not "over"
        fractions = used * self._inverse[rows][:, columns]
        fractions = np.where(has, np.where(most, fractions, 1.0 - fractions), 0.0)
        over = ((used > allocatable) & has).any(axis=1)
        return np.where(over, 0.0, fractions @ weights)

    def score_with_sra(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        sra = self._sra_score(task, nodes)[rows]
        return self.score(task, nodes, rows) + sra if self.weight else sra

    def _sra_score(self, task: TaskInfo, nodes: NodeTable) -> np.ndarray:
        """Per node (all rows), the `sra` score: it reads only allocatable, so one per class."""
        found = self._sra_scores.get(task.placement)
        if found is not None:
            return found
        assert self.sra is not None
        column = self.session.resources.column
        allocatable = nodes.allocatable
        asked = [c for c in np.flatnonzero(task.request > 0) if self.session.resources.names[c] != PODS]
        lacking = (allocatable[:, asked] <= 0).any(axis=1)
        listed = [(column[name], weight) for name, weight in self.sra.resources.items() if name in column]
        held = np.zeros(len(allocatable))
        for listed_column, weight in listed:
            held += np.where(allocatable[:, listed_column] > 0, weight, 0.0)
        score = (1.0 - held / self.sra.weight_sum) * (MAX_SCORE * self.sra.weight)
        found = self._sra_scores[task.placement] = np.where(lacking, 0.0, score)
        return found

    def _asks_no_kept(self, task: TaskInfo) -> bool:
        return not any(task.request[column] > 0 for column, _ in self._kept)

    def _kept_back(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> tuple[np.ndarray, list[str]]:
        """Per row, whether the pod leaves every idle listed resource its cpu and memory, and the
        resource names in the order checked (for the explanation)."""
        idle = nodes.idle[rows]
        cpu_left = idle[:, self._cpu] - task.request[self._cpu]
        memory_left = idle[:, self._memory] - task.request[self._memory]
        ok = np.ones(len(idle), dtype=bool)
        for column, (cpu_rate, memory_rate) in self._kept:
            units = np.maximum(idle[:, column], 0).astype(np.float64)
            has = nodes.allocatable[rows][:, column] > 0
            keeps = (cpu_left >= units * cpu_rate * 1000) & (memory_left >= units * memory_rate * 1e9)
            ok &= ~has | keeps
        return ok, [self.session.resources.names[column] for column, _ in self._kept]

    def proportional(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        return self._kept_back(task, nodes, rows)[0]

    def explain_proportional(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        ok, names = self._kept_back(task, nodes, slice(None))
        refused = int((~ok & nodes.schedulable).sum())
        reason = (
            f"node(s) must keep cpu and memory for their idle {', '.join(names)} (resource-strategy-fit proportional)"
        )
        return Counter({reason: refused} if refused else {})
