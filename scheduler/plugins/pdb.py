"""pdb: preempt, reclaim and shuffle take no victim a PodDisruptionBudget protects (Volcano's pdb
plugin).

A budget covers the pods of its namespace its `spec.selector` matches (an empty selector covers
none, as Volcano reads it). Its disruptions allowed are computed from the session's pods the way
the disruption controller does: healthy covered pods (running, not being evicted, Ready when they
report readiness) less the desired healthy count (`minAvailable`, or the covered count less
`maxUnavailable`; percentages of the covered count, rounded up); when the API's status has
`disruptionsAllowed`, the smaller of the two counts. Unlike Volcano, which starts every victim
filter from the status again, the evictions this session already staged or committed use the
budget up: two preemptions in one cycle cannot take two pods of a budget allowing one. A pod
the budget lists in `status.disruptedPods` costs nothing (being evicted already).

The filter (`Session.add_eviction_filter_fn`): of the victims preempt, reclaim or shuffle chose,
those whose every covering budget still has a disruption to give, taken in the order given. It
has the last word whatever the tiers decided: in Volcano the plugin is a tier's victim filter, and
when it empties its tier a later tier's plugins choose without it (protected pods are then
evicted, or refused by the eviction API after the preemptor was pipelined); Lahar never picks
them. The eviction API refuses what a budget does not allow anyway; this keeps the scheduler from
choosing such victims, and a gang whose room would need them goes elsewhere or waits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lahar.api.selectors import LabelSelector, SelectorError, label_selector_from_dict
from lahar.scheduler.framework.plugin import Plugin, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import TaskInfo, TaskStatus

COUNTED = frozenset({TaskStatus.PENDING, TaskStatus.ALLOCATED, TaskStatus.PIPELINED, TaskStatus.BINDING})
COUNTED |= {TaskStatus.BOUND, TaskStatus.RUNNING, TaskStatus.RELEASING}


@dataclass
class Budget:
    namespace: str
    name: str
    selector: LabelSelector
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    allowed: int = 0

    def covers(self, task: TaskInfo) -> bool:
        return task.namespace == self.namespace and self.selector.matches(task.pod.meta.labels)


def _scaled(value: Any, total: int) -> int | None:
    if isinstance(value, str) and value.endswith("%"):
        try:
            return math.ceil(float(value[:-1]) * total / 100)
        except ValueError:
            return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def healthy(task: TaskInfo) -> bool:
    """Running, not being evicted, and Ready when the pod reports readiness."""
    if task.status is not TaskStatus.RUNNING:
        return False
    for condition in task.pod.status.get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return True


def disruptions_allowed(budget: Budget, covered: list[TaskInfo]) -> int:
    """The disruption controller's count for `covered` (the budget's pods), capped by the status."""
    spec, total = budget.spec, len(covered)
    desired = 0
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], total) or 0
    elif spec.get("maxUnavailable") is not None:
        desired = max(total - (_scaled(spec["maxUnavailable"], total) or 0), 0)
    allowed = sum(1 for task in covered if healthy(task)) - desired
    reported = budget.status.get("disruptionsAllowed")
    if isinstance(reported, int) and not isinstance(reported, bool):
        allowed = min(allowed, reported)
    return allowed


@register_plugin
class PdbPlugin(Plugin):
    name = "pdb"

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.budgets: list[Budget] = []
        for obj in session.snapshot.disruption_budgets:
            metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
            assert isinstance(metadata, Mapping) and isinstance(spec, Mapping)
            try:
                selector = label_selector_from_dict(spec.get("selector"))
            except SelectorError:
                continue  # the API refuses such a budget; one that got through covers nothing
            if selector.empty:
                continue  # Volcano: an empty selector protects nothing
            status = obj.get("status") or {}
            assert isinstance(status, Mapping)
            self.budgets.append(Budget(metadata.get("namespace", ""), metadata.get("name", ""), selector, spec, status))
        if not self.budgets:
            return
        self._count()
        self._evicted: set[str] = set()
        session.add_eviction_filter_fn(self.victims_of)
        session.add_event_handler(self._restored, self._released)

    def _count(self) -> None:
        covered: dict[int, list[TaskInfo]] = {i: [] for i in range(len(self.budgets))}
        seen: set[str] = set()
        tasks = [task for job in self.session.jobs.values() for task in job.tasks.values()]
        tasks += [task for row in self.session.nodes.tasks for task in row.values() if not task.job]
        for task in tasks:
            if task.uid in seen or task.status not in COUNTED:
                continue
            seen.add(task.uid)
            for i, budget in enumerate(self.budgets):
                if budget.covers(task):
                    covered[i].append(task)
        for i, budget in enumerate(self.budgets):
            budget.allowed = disruptions_allowed(budget, covered[i])

    def _covering(self, task: TaskInfo) -> list[Budget]:
        disrupted = task.name
        return [
            budget
            for budget in self.budgets
            if budget.covers(task) and disrupted not in (budget.status.get("disruptedPods") or {})
        ]

    def _released(self, task: TaskInfo) -> None:
        if task.status is TaskStatus.RELEASING and task.uid not in self._evicted:
            self._evicted.add(task.uid)
            for budget in self._covering(task):
                budget.allowed -= 1

    def _restored(self, task: TaskInfo) -> None:
        if task.uid in self._evicted and task.status is not TaskStatus.RELEASING:
            self._evicted.discard(task.uid)
            for budget in self._covering(task):
                budget.allowed += 1

    def victims_of(self, candidates: list[TaskInfo]) -> list[TaskInfo]:
        """The candidates the budgets let go, taking each one's disruption in turn."""
        spent: dict[int, int] = {}
        chosen = []
        for task in candidates:
            covering = self._covering(task)
            if all(budget.allowed - spent.get(id(budget), 0) > 0 for budget in covering):
                for budget in covering:
                    spent[id(budget)] = spent.get(id(budget), 0) + 1
                chosen.append(task)
        return chosen
