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

Arguments: `resourceStrategyFitWeight` (10), `resources` (resource -> `{type, weight}`; cpu and
memory `LeastAllocated` weight 1 when not given). A bad type or weight refuses the configuration
(Volcano falls back to defaults silently). Volcano's `sra` and `proportional` sub-policies are not
implemented: configured, they are reported as unknown arguments (a warning, and the
`lahar_scheduler_conf_warnings` gauge).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any, ClassVar

import numpy as np

from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import PODS, NodeTable, Rows, TaskInfo, TaskStatus

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


def _configured(name: str, resources: Mapping[str, Strategy]) -> Strategy | None:
    if name in resources:
        return resources[name]
    best: tuple[int, Strategy] | None = None
    for pattern, strategy in resources.items():
        prefix = pattern[:-1] if pattern.endswith("*") else None
        if prefix is not None and name.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), strategy)
    return None if best is None else best[1]


@register_plugin
class ResourceStrategyFitPlugin(Plugin):
    name = "resource-strategy-fit"
    ARGUMENTS: ClassVar[Arguments] = {
        "resourceStrategyFitWeight": number(minimum=0),
        "resources": resources_argument,
    }

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.weight = self.argument("resourceStrategyFitWeight", 10.0)
        self.resources: dict[str, Strategy] = self.argument("resources", DEFAULT_RESOURCES)
        allocatable = session.nodes.allocatable.astype(np.float64)
        self._inverse = np.divide(1.0, allocatable, out=np.zeros_like(allocatable), where=allocatable > 0)
        self._plans: dict[Hashable, tuple[np.ndarray, np.ndarray, np.ndarray] | None] = {}
        if not self.weight:
            return
        session.add_node_order_fn(self.score)
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
                strategy = _configured(name, self.resources)
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
