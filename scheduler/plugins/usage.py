"""usage: real load from the agents' reports (Volcano's usage plugin, fed by Lahar's agents
instead of Prometheus).

At session open, each node's latest report no older than `staleness` seconds gives its live CPU
usage (share of its cores busy, less what best-effort pods use: they run at the smallest CPU
weight and give way to any other pod at once, so a node busy with harvested CPU is not busy to the
next pod) and memory usage (used / total, BE included: memory is not given back at once); the
arrays stay fixed for the session. The predicate refuses nodes whose CPU or memory usage is over `thresholds.cpu` /
`thresholds.mem` percent (default 80/80); a node without a fresh report passes, as in Volcano.
The score prefers less loaded nodes: `((1 − U_cpu)·cpu.weight + (1 − U_mem)·memory.weight) /
(cpu.weight + memory.weight) × 100 × usage.weight` (defaults 1, 1, 5), where U adds to the
reported usage the requests this session placed on the node (Volcano's "shadow" load: the
reports cannot show them yet). A node without a fresh report scores as if half loaded; with no
fresh report anywhere the plugin registers nothing (every node would pass and score the same).

Volcano's conf writes the thresholds as a mapping (`thresholds: {cpu: 80, mem: 80}`); the
flat `thresholds.cpu` / `thresholds.mem` keys are accepted too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from lahar.api.qos import QoSClass
from lahar.rpc.report import NodeReport
from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import REPORT_STALENESS_SECONDS, Session
from lahar.scheduler.model import CPU, MEMORY, NodeTable, Rows, TaskInfo, TaskStatus

MAX_SCORE = 100.0
UNKNOWN_USAGE = 0.5  # what a node without a fresh report scores as
percent = number(minimum=0, maximum=100)
weight = number(minimum=0)


def thresholds(value: Any) -> dict[str, float]:
    """Volcano's `thresholds: {cpu: 80, mem: 80}` mapping."""
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a mapping such as {{cpu: 80, mem: 80}}, not {value!r}")
    unknown = set(value) - {"cpu", "mem"}
    if unknown:
        raise ValueError(f"has unknown keys {sorted(unknown)} (accepted: cpu, mem)")
    return {key: percent(amount) for key, amount in value.items()}


def cpu_usage_ratio_without_be(report: NodeReport) -> float:
    """The share of the node's cores busy with anything but best-effort pods."""
    be_cores = sum(pod.cpu_usage_cores for pod in report.pods if pod.qos_class == QoSClass.BE)
    return max(0.0, report.cpu.usage_cores - be_cores) / report.cpu.cores


@register_plugin
class Usage(Plugin):
    name = "usage"
    ARGUMENTS: ClassVar[Arguments] = {
        "thresholds": thresholds,
        "thresholds.cpu": percent,
        "thresholds.mem": percent,
        "usage.weight": weight,
        "cpu.weight": weight,
        "memory.weight": weight,
        "staleness": number(minimum=0),
    }

    def _threshold(self, key: str) -> float:
        return float(self.argument(f"thresholds.{key}", self.argument("thresholds", {}).get(key, 80.0)))

    def on_session_open(self, session: Session) -> None:
        reports = session.fresh_reports(float(self.argument("staleness", REPORT_STALENESS_SECONDS)))
        n = len(reports)
        self._cpu_threshold, self._mem_threshold = self._threshold("cpu"), self._threshold("mem")
        self._known = np.zeros(n, dtype=bool)
        self._usage = np.full((n, 2), UNKNOWN_USAGE)  # cpu, memory as shares of the node
        self._capacity = np.ones((n, 2))  # millicores, bytes: what the shares are of
        for row, report in enumerate(reports):
            if report is None or report.cpu.cores <= 0 or report.memory.total_bytes <= 0:
                continue
            self._known[row] = True
            self._usage[row] = (
                cpu_usage_ratio_without_be(report),
                report.memory.used_bytes / report.memory.total_bytes,
            )
            self._capacity[row] = (report.cpu.cores * 1000, report.memory.total_bytes)
        self._hot = self._known & (
            (self._usage[:, 0] * 100 > self._cpu_threshold) | (self._usage[:, 1] * 100 > self._mem_threshold)
        )
        cpu_weight, memory_weight = float(self.argument("cpu.weight", 1.0)), float(self.argument("memory.weight", 1.0))
        total = cpu_weight + memory_weight
        self._weights = (cpu_weight / total, memory_weight / total) if total else (0.0, 0.0)
        self._scale = MAX_SCORE * float(self.argument("usage.weight", 5.0))
        columns = session.resources.column
        self._columns = [columns[CPU], columns[MEMORY]]
        # Requests placed this session (not yet in any report), as shares of known nodes.
        self._shadow = np.zeros((n, 2))
        self._placed: dict[str, tuple[int, np.ndarray]] = {}  # uid -> row, its shadow
        self._rows = session.nodes.index
        if not self._known.any():
            return  # no live data anywhere: every node passes and scores the same
        session.add_predicate_fn(self._predicate, self._explain, row=self._predicate_row)
        if self._scale and total:
            session.add_node_order_fn(self._score, row=self._score_row)
            session.add_event_handler(self._on_allocate, self._on_deallocate)

    def _predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        return ~self._hot[rows]

    def _explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        hot = int((self._hot & nodes.schedulable).sum())
        reason = f"node(s) too busy (usage over cpu {self._cpu_threshold:g}% or memory {self._mem_threshold:g}%)"
        return Counter({reason: hot} if hot else {})

    def _predicate_row(self, task: TaskInfo, nodes: NodeTable, row: int) -> bool:
        return not self._hot[row]

    def _weighted(self, cpu_free: Any, memory_free: Any) -> Any:
        """The score from the unused shares: for arrays (one value per row) or floats alike, the
        same operations in the same order, so `_score_row` is bit for bit `_score`'s."""
        cpu_weight, memory_weight = self._weights
        return (cpu_free * cpu_weight + memory_free * memory_weight) * self._scale

    def _score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        free = 1.0 - np.clip(self._usage[rows] + self._shadow[rows], 0.0, 1.0)
        scores: np.ndarray = self._weighted(free[:, 0], free[:, 1])
        return scores

    def _score_row(self, task: TaskInfo, nodes: NodeTable, row: int) -> float:
        """`_score` for one row, in plain Python."""
        cpu, memory = (
            1.0 - min(max(usage + shadow, 0.0), 1.0)
            for usage, shadow in zip(self._usage[row].tolist(), self._shadow[row].tolist(), strict=True)
        )
        score: float = self._weighted(cpu, memory)
        return score

    def _on_allocate(self, task: TaskInfo) -> None:
        # Placements only: a restored eviction (status back to Running/Bound) was never shadowed.
        if task.status in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED) and task.uid not in self._placed:
            row = self._rows[task.node]
            if self._known[row]:
                shadow = task.request[self._columns] / self._capacity[row]
                self._placed[task.uid] = (row, shadow)
                self._shadow[row] += shadow

    def _on_deallocate(self, task: TaskInfo) -> None:
        # An evicted task still loads its node until it is gone; only undone placements leave.
        if task.status is TaskStatus.PENDING and task.uid in self._placed:
            row, shadow = self._placed.pop(task.uid)
            self._shadow[row] -= shadow
