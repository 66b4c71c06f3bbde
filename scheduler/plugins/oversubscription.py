"""oversubscription: BE pods placed against the capacity the agents report as reclaimable.

Each node's agent reports what best-effort pods may borrow there (`NodeReport.reclaimable`,
agent/qos/reclaimable.py: the CPU online pods leave idle less a margin, memory conservatively;
cpu in millicores, memory in bytes): the whole BE budget of the node, not what is left of it.
This plugin lends that budget to the session as `session.be_capacity` (nodes × cpu, memory); the
one fit rule (`NodeTable.fits`,
which the predicates plugin applies with `session.be_capacity`) then places BE tasks against
`be_capacity − be_used` and online tasks against allocatable minus their own requests. A node
whose latest report is older than `staleness` seconds, or that never reported, lends nothing:
BE tasks that request cpu or memory are not placed there, and the unschedulable reason says so
(`STALE_REASON`), not merely "Insufficient cpu".

The score prefers, for BE tasks, nodes with more of their budget left after the task (the mean
over cpu and memory of the share left); online tasks get no opinion.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import numpy as np

from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import REPORT_STALENESS_SECONDS, Session
from lahar.scheduler.model import LENT_COLUMNS, NodeTable, Rows, TaskInfo

MAX_SCORE = 100.0
STALE_REASON = "node(s) had no fresh agent report: nothing lent to best-effort pods"


@register_plugin
class Oversubscription(Plugin):
    name = "oversubscription"
    ARGUMENTS: ClassVar[Arguments] = {"staleness": number(minimum=0), "weight": number(minimum=0)}
    LENDS_TO_BE = True

    def on_session_open(self, session: Session) -> None:
        reports = session.fresh_reports(float(self.argument("staleness", REPORT_STALENESS_SECONDS)))
        capacity = np.zeros((len(session.nodes), len(LENT_COLUMNS)), dtype=np.int64)
        for row, report in enumerate(reports):
            if report is not None:
                capacity[row] = [max(0, int(report.reclaimable.get(name, 0))) for name in LENT_COLUMNS]
        session.be_capacity = capacity
        self._capacity = capacity
        self._reported = np.array([report is not None for report in reports], dtype=bool)
        if not self._reported.all():
            session.add_predicate_fn(self._predicate, self._explain, applies=self._borrows, row=self._predicate_row)
        self._weight = float(self.argument("weight", 1.0))
        if self._weight and capacity.any():
            session.add_node_order_fn(self._score, applies=lambda task: task.best_effort, row=self._score_row)

    @staticmethod
    def _borrows(task: TaskInfo) -> bool:
        """A BE task asking for cpu or memory: the only kind the lent capacity concerns (the
        others pass the predicate everywhere, so it is not asked about them)."""
        return task.best_effort and bool(task.request[: len(LENT_COLUMNS)].any())

    def _predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        """BE tasks that borrow cpu or memory only where the agent reported recently."""
        reported = self._reported[rows]
        if not self._borrows(task):
            return np.ones(len(reported), dtype=bool)
        return reported

    def _explain(self, task: TaskInfo, nodes: NodeTable) -> Counter[str]:
        if not self._borrows(task):
            return Counter()
        stale = int((~self._reported).sum())
        return Counter({STALE_REASON: stale}) if stale else Counter()

    def _predicate_row(self, task: TaskInfo, nodes: NodeTable, row: int) -> bool:
        return not self._borrows(task) or bool(self._reported[row])

    def _combine(self, shares: list[Any]) -> Any:
        """The mean of the lent columns' shares left, scaled: for arrays (one value per row) or
        floats alike, the same operations in the same order, so `_score_row` is bit for bit
        `_score`'s."""
        total = shares[0]
        for share in shares[1:]:
            total = total + share
        return total / len(shares) * MAX_SCORE * self._weight

    def _score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        capacity = self._capacity[rows]
        if not task.best_effort:
            return np.zeros(len(capacity))
        lent = len(LENT_COLUMNS)
        left = capacity - nodes.be_used[rows, :lent] - task.request[:lent]
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.clip(np.where(capacity > 0, left / capacity, 0.0), 0.0, 1.0)
        scores: np.ndarray = self._combine([share[:, column] for column in range(lent)])
        return scores

    def _score_row(self, task: TaskInfo, nodes: NodeTable, row: int) -> float:
        """`_score` for one row, in plain Python (the division as numpy's: of the two floats)."""
        if not task.best_effort:
            return 0.0
        be_used, request = nodes.be_used[row].tolist(), task.request.tolist()
        shares = [
            min(max(float(capacity - be_used[column] - request[column]) / float(capacity), 0.0), 1.0)
            if capacity > 0
            else 0.0
            for column, capacity in enumerate(self._capacity[row].tolist())
        ]
        score: float = self._combine(shares)
        return score
