"""Per-class CPU counters (docs/metrics.md, `lahar_class_*`): CPU time, throttled time and online
CPU wait of each QoS class (LC, LS, BE, SYSTEM), as counters that only go up.

A class's figure is a sum over members that come and go (pods start and end, BE groups appear
with their first pod), and each member's own counter is cumulative. Summing the members' current
values would drop when one ends, which `rate()` reads as a counter reset and turns into a spike.
So each class keeps a running total that grows by every member's increase since the last update;
a member seen for the first time adds what it has (its time before the agent started happened
too), and one whose counter went down (its cgroup was made again) adds its new value.

Throttling is counted where it happens: the BE CPU cap sits on the parent groups the QoS engine
writes (`be_groups`), so BE's throttled time is read there (the engine's snapshot), not from the
pods under it, whose own cgroups are never throttled by it."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lahar.api.qos import QoSClass
from lahar.rpc.report import NodeReport

if TYPE_CHECKING:
    from lahar.agent.qos.engine import QosSnapshot

CLASSES = tuple(str(qos) for qos in QoSClass)  # every class has its series, at 0 until it counts
CPU_SECONDS, THROTTLED_SECONDS, THROTTLED_PERIODS, WAIT_SECONDS = (
    "cpu_usage_seconds",
    "cpu_throttled_seconds",
    "cpu_throttled_periods",
    "cpu_wait_seconds",
)
FIGURES = (CPU_SECONDS, THROTTLED_SECONDS, THROTTLED_PERIODS, WAIT_SECONDS)
BE_PARENT = "be-parent"  # the member key of the BE groups' throttling, read where the cap is


def advance(total: float, last: Mapping[str, float], now: Mapping[str, float]) -> tuple[float, dict[str, float]]:
    """The running total after members' cumulative values went from `last` to `now`: it grows by
    each member's increase; a new member or one whose counter went down adds its whole value; a
    member that is gone adds nothing (its time was counted while it ran)."""
    for key, value in now.items():
        before = last.get(key)
        total += value if before is None or value < before else value - before
    return total, dict(now)


@dataclass
class _Running:
    total: float = 0.0
    last: dict[str, float] = field(default_factory=dict)

    def update(self, values: Mapping[str, float]) -> None:
        self.total, self.last = advance(self.total, self.last, values)


def members(report: NodeReport, qos: QosSnapshot | None) -> dict[tuple[str, str], dict[str, float]]:
    """(figure, class) -> member -> its cumulative value, from one report and QoS snapshot."""
    found: dict[tuple[str, str], dict[str, float]] = {(f, c): {} for f in FIGURES for c in CLASSES}
    be_at_parent = qos is not None and qos.be_groups_read
    for pod in report.pods:
        if pod.qos_class not in CLASSES:
            continue
        found[(CPU_SECONDS, pod.qos_class)][pod.uid] = pod.cpu_usage_seconds_total
        if not (be_at_parent and pod.qos_class == str(QoSClass.BE)):
            found[(THROTTLED_SECONDS, pod.qos_class)][pod.uid] = pod.cpu_throttled_seconds_total
            found[(THROTTLED_PERIODS, pod.qos_class)][pod.uid] = float(pod.cpu_throttled_periods_total)
    if qos is not None:
        if be_at_parent:
            be = str(QoSClass.BE)
            found[(THROTTLED_SECONDS, be)][BE_PARENT] = qos.be_throttled_seconds
            found[(THROTTLED_PERIODS, be)][BE_PARENT] = float(qos.be_throttled_periods)
        for wait in qos.online_waits:
            if wait.qos_class in CLASSES:
                found[(WAIT_SECONDS, wait.qos_class)][wait.uid] = wait.wait_seconds
    return found


class ClassTotals:
    """The running per-class totals, updated once per report (not per scrape)."""

    def __init__(self) -> None:
        self._running = {(f, c): _Running() for f in FIGURES for c in CLASSES}
        self._lock = threading.Lock()

    def update(self, report: NodeReport, qos: QosSnapshot | None) -> None:
        with self._lock:
            for key, values in members(report, qos).items():
                self._running[key].update(values)

    def snapshot(self) -> dict[tuple[str, str], float]:
        """(figure, class) -> its total so far."""
        with self._lock:
            return {key: running.total for key, running in self._running.items()}


def totals_of(updates: Iterable[tuple[NodeReport, QosSnapshot | None]]) -> dict[tuple[str, str], float]:
    """The totals after a sequence of updates (for the metrics catalogue and tests)."""
    totals = ClassTotals()
    for report, qos in updates:
        totals.update(report, qos)
    return totals.snapshot()
