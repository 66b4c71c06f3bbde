"""binpack: favour fuller nodes (Volcano's binpack plugin and formula).

For each resource the pod asks for and that has a weight, `(used + request) / allocatable × weight`
(0 for a resource the node has none of); the sum over those resources is divided by the sum of
their weights, scaled to 0–100 and multiplied by `binpack.weight`. A node where any of them would
be overcommitted scores 0. Arguments as Volcano's: `binpack.weight` (1), `binpack.cpu` (1),
`binpack.memory` (1), `binpack.resources` (a comma-separated list of other resources) and
`binpack.resources.<name>` (each one's weight, 1 when not given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin, text
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import CPU, MEMORY, NodeTable, Rows, TaskInfo

MAX_SCORE = 100.0
RESOURCE_PREFIX = "binpack.resources."


@register_plugin
class BinpackPlugin(Plugin):
    name = "binpack"
    ARGUMENTS: ClassVar[Arguments] = {
        "binpack.weight": number(minimum=0),
        "binpack.cpu": number(minimum=0),
        "binpack.memory": number(minimum=0),
        "binpack.resources": text,
    }
    ARGUMENT_PREFIXES: ClassVar[Arguments] = {RESOURCE_PREFIX: number(minimum=0)}

    def on_session_open(self, session: Session) -> None:
        self.weight = self.argument("binpack.weight", 1.0)
        column = session.resources.column
        weights = np.zeros(len(session.resources))
        weights[column[CPU]] = self.argument("binpack.cpu", 1.0)
        weights[column[MEMORY]] = self.argument("binpack.memory", 1.0)
        for name in (part.strip() for part in self.argument("binpack.resources", "").split(",")):
            if name and name in column:  # a resource no node or pod has scores nothing
                weights[column[name]] = self.argument(RESOURCE_PREFIX + name, 1.0)
        self.weights = weights
        # Allocatable does not change within a session: keep its inverse (0 where a node has none
        # of a resource, which scores 0 there as Volcano's formula does).
        allocatable = session.nodes.allocatable.astype(np.float64)
        self._inverse = np.divide(1.0, allocatable, out=np.zeros_like(allocatable), where=allocatable > 0)
        self._scored: dict[str, _Columns] = {}
        if self.weight and weights.any():
            session.add_node_order_fn(self.score, row=self.score_row)

    def _columns(self, task: TaskInfo) -> _Columns:
        """The weighted resources the task asks for and their weights, scaled so that the score
        spans 0–100 × binpack.weight."""
        scored = self._scored.get(task.placement)
        if scored is None:
            found = np.flatnonzero((task.request > 0) & (self.weights > 0))
            weight_sum = float(self.weights[found].sum())
            scale = MAX_SCORE * self.weight / weight_sum if weight_sum else 0.0
            scored = self._scored[task.placement] = _Columns(found.tolist(), (self.weights[found] * scale).tolist())
        return scored

    @staticmethod
    def _weighted(fractions: Sequence[Any], weights: list[float]) -> Any:
        """Σ fraction × weight over the columns, left to right: for columns of arrays (one value
        per row) or floats alike, so a row's score (`score_row`) is bit for bit the array's."""
        total = fractions[0] * weights[0]
        for fraction, weight in zip(fractions[1:], weights[1:], strict=True):
            total = total + fraction * weight
        return total

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        columns, weights = self._columns(task)
        if not columns:
            return np.zeros(len(nodes.schedulable[rows]))
        used = nodes.used[rows][:, columns] + nodes.be_used[rows][:, columns] + task.request[columns]
        fractions = used * self._inverse[rows][:, columns]
        over = np.logical_or.reduce(fractions > 1.0, axis=1)
        scores: np.ndarray = np.where(
            over, 0.0, self._weighted([fractions[:, i] for i in range(len(columns))], weights)
        )
        return scores

    def score_row(self, task: TaskInfo, nodes: NodeTable, row: int) -> float:
        """`score` for one row, in plain Python."""
        columns, weights = self._columns(task)
        if not columns:
            return 0.0
        used, be_used, request = nodes.used[row].tolist(), nodes.be_used[row].tolist(), task.request.tolist()
        inverse = self._inverse[row].tolist()
        fractions = [(used[c] + be_used[c] + request[c]) * inverse[c] for c in columns]
        if any(fraction > 1.0 for fraction in fractions):
            return 0.0
        return float(self._weighted(fractions, weights))


class _Columns(NamedTuple):
    """What binpack scores for a placement class: the resource columns and their weights."""

    columns: list[int]
    weights: list[float]
