"""binpack: favour fuller nodes (Volcano's binpack plugin and formula).

For each resource the pod asks for and that has a weight, `(used + request) / allocatable × weight`
(0 for a resource the node has none of); the sum over those resources is divided by the sum of
their weights, scaled to 0–100 and multiplied by `binpack.weight`. A node where any of them would
be overcommitted scores 0. Arguments as Volcano's: `binpack.weight` (1), `binpack.cpu` (1),
`binpack.memory` (1), `binpack.resources` (a comma-separated list of other resources) and
`binpack.resources.<name>` (each one's weight, 1 when not given).
"""

from __future__ import annotations

from typing import ClassVar

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
        self._scored: dict[str, tuple[slice | np.ndarray, np.ndarray]] = {}
        if self.weight and weights.any():
            session.add_node_order_fn(self.score)

    def _columns(self, task: TaskInfo) -> tuple[slice | np.ndarray, np.ndarray]:
        """The weighted resources the task asks for (a slice when adjacent, as cpu and memory
        are) and their weights, scaled so that the score spans 0–100 × binpack.weight."""
        scored = self._scored.get(task.placement)
        if scored is None:
            found = np.flatnonzero((task.request > 0) & (self.weights > 0))
            weight_sum = float(self.weights[found].sum())
            columns: slice | np.ndarray = found
            if len(found) and found[-1] - found[0] == len(found) - 1:
                columns = slice(int(found[0]), int(found[-1]) + 1)
            scale = MAX_SCORE * self.weight / weight_sum if weight_sum else 0.0
            scored = self._scored[task.placement] = (columns, self.weights[found] * scale)
        return scored

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        columns, weights = self._columns(task)
        used = nodes.used[rows, columns] + nodes.be_used[rows, columns] + task.request[columns]
        fractions = used * self._inverse[rows, columns]
        return np.where(np.logical_or.reduce(fractions > 1.0, axis=1), 0.0, fractions @ weights)
