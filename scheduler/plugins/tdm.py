"""tdm: time-division multiplexing of revocable nodes (Volcano's tdm plugin).

A node labelled `volcano.sh/revocable-zone: <zone>` is revocable: it lends itself to preemptable
work only during its zone's window, the argument `tdm.revocable-zone.<zone>: "HH:MM-HH:MM"`
(scheduler local time; an end before the start runs past midnight). A pod may go there only if it
says `volcano.sh/revocable-zone` (any value: Volcano reads "*" and a zone alike) and only while
the window is open; a revocable node of a zone with no window configured takes nothing.

- predicate: the rules above; node order: 100 for a revocable node in its window, to a pod that
  may go there (so such pods fill revocable nodes first);
- preemptable: a preemptor that is neither preemptable nor revocable may evict running pods marked
  `volcano.sh/preemptable: "true"` on ordinary nodes, at most the job's disruption budget per job
  (PodGroup annotations `volcano.sh/jdb-max-unavailable` / `volcano.sh/jdb-min-available`, a count
  or a percentage; one when neither is set); any other preemptor is refused here (the next tier
  decides);
- victim tasks (the `shuffle` action): once a zone's window has closed, the preemptable running
  pods on its nodes, within the same budget per job, at most once per `tdm.evict.period` (1m);
- job order: jobs that are not preemptable first; job starving: a job that is not preemptable
  and has pending tasks.

A window that cannot be read refuses the configuration (Volcano logs it and treats the zone as
closed). The evict period is the one piece of state kept across sessions (the time of the last
shuffle), as Volcano keeps it.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Any, ClassVar

import numpy as np

from lahar.scheduler.framework.plugin import Arguments, Plugin, go_duration, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import JobInfo, NodeTable, Rows, TaskInfo, TaskStatus, preemptable_flag

ZONE_LABEL = "volcano.sh/revocable-zone"
ZONE_PREFIX = "tdm.revocable-zone."
EVICT_PERIOD = "tdm.evict.period"
MAX_UNAVAILABLE = "volcano.sh/jdb-max-unavailable"
MIN_AVAILABLE = "volcano.sh/jdb-min-available"
MAX_SCORE = 100.0


_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")


def window(value: Any) -> tuple[int, int]:
    """`H:MM-H:MM` (Go's "15:04": one- or two-digit hours, two-digit minutes) as minutes of the
    day (start, end)."""
    parts = value.strip().split("-") if isinstance(value, str) else []
    minutes = []
    for part in parts:
        clock = _CLOCK.fullmatch(part)
        if clock is None or int(clock.group(1)) > 23 or int(clock.group(2)) > 59:
            break
        minutes.append(int(clock.group(1)) * 60 + int(clock.group(2)))
    if len(parts) != 2 or len(minutes) != 2:
        raise ValueError(f'must be a window such as "10:00-21:00", not {value!r}')
    return minutes[0], minutes[1]


def length(span: tuple[int, int]) -> int:
    """The window's length in seconds: an end not after the start is on the next day."""
    start, end = span
    return ((end - start) if end > start else (end + 24 * 60 - start)) * 60


def is_open(span: tuple[int, int], now: datetime) -> bool:
    """Whether `now` is in the window, as Volcano computes it: the window starts today; one whose
    end is not after its start ends tomorrow."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    start = midnight + timedelta(minutes=span[0])
    return start <= now.replace(microsecond=0) <= start + timedelta(seconds=length(span))


def budget(job: JobInfo) -> int:
    """How many of the job's running tasks may be taken at once (Volcano's maxVictims)."""
    notes = {} if job.podgroup is None else job.podgroup.meta.annotations
    total, running = len(job.tasks), job.count((TaskStatus.RUNNING,))
    if notes.get(MAX_UNAVAILABLE):
        allowed = _count_or_percent(notes[MAX_UNAVAILABLE], total)
        finished = job.count((TaskStatus.SUCCEEDED, TaskStatus.FAILED))
        unavailable = total - finished - running
        return max(allowed - unavailable, 0)
    if notes.get(MIN_AVAILABLE):
        needed = _count_or_percent(notes[MIN_AVAILABLE], total)
        return max(running - needed, 0) if running >= needed else 1
    return 1


def _count_or_percent(value: str, total: int) -> int:
    value = value.strip()
    try:
        return math.ceil(float(value[:-1]) * total / 100) if value.endswith("%") else int(value)
    except ValueError:
        return 0


def explicitly_preemptable(annotations: Any, labels: Any) -> bool:
    """Volcano's Preemptable of a pod or job: `volcano.sh/preemptable` says true (off by default)."""
    return preemptable_flag(annotations, labels) is True


@register_plugin
class TdmPlugin(Plugin):
    name = "tdm"
    ARGUMENTS: ClassVar[Arguments] = {EVICT_PERIOD: go_duration}
    ARGUMENT_PREFIXES: ClassVar[Arguments] = {ZONE_PREFIX: window}
    _last_shuffle: ClassVar[float | None] = None  # across sessions, as Volcano's lastEvictAt

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.windows = {
            key[len(ZONE_PREFIX) :]: span for key, span in self.arguments.items() if key.startswith(ZONE_PREFIX)
        }
        self.period = self.argument(EVICT_PERIOD, 60.0)
        now = datetime.fromtimestamp(session.now)
        zones = [labels.get(ZONE_LABEL, "") for labels in session.nodes.labels]
        self.revocable = np.array([bool(zone) for zone in zones], dtype=bool)
        self.open_now = np.array(
            [bool(zone) and zone in self.windows and is_open(self.windows[zone], now) for zone in zones], dtype=bool
        )
        self.closed_zones = {zone for zone, span in self.windows.items() if not is_open(span, now)}
        self.zones = zones
        if self.revocable.any():
            session.add_predicate_fn(self.predicate)
            session.add_node_order_fn(self.score)
            # The pod's annotation decides, and annotations are outside its placement class.
            session.add_class_key_fn(self.task_revocable)
        session.add_preemptable_fn(self.victims)
        session.add_victim_tasks_fn(self.victim_tasks)
        session.add_job_order_fn(lambda job: 0 if not self.job_preemptable(job) else 1)
        session.add_job_starving_fn(self.job_starving)

    @staticmethod
    def task_revocable(task: TaskInfo) -> bool:
        return bool(task.pod.meta.annotations.get(ZONE_LABEL))

    @staticmethod
    def task_preemptable(task: TaskInfo) -> bool:
        meta = task.pod.meta
        return explicitly_preemptable(meta.annotations, meta.labels)

    @staticmethod
    def job_preemptable(job: JobInfo) -> bool:
        group = job.podgroup
        return group is not None and explicitly_preemptable(group.meta.annotations, group.meta.labels)

    def predicate(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        # An ordinary node takes anyone; a revocable one only a revocable pod, in its window.
        allowed = self.open_now if self.task_revocable(task) else np.zeros_like(self.open_now)
        return (~self.revocable | allowed)[rows]

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        if not self.task_revocable(task):
            return np.zeros(len(self.revocable[rows]), dtype=np.float64)
        return np.where(self.open_now[rows], MAX_SCORE, 0.0)

    def victims(self, preemptor: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        if self.task_preemptable(preemptor) or self.task_revocable(preemptor):
            return []
        index = self.session.nodes.index
        by_job: dict[str, list[TaskInfo]] = {}
        for task in candidates:
            row = index.get(task.node)
            if (
                task.status is TaskStatus.RUNNING
                and self.task_preemptable(task)
                and row is not None
                and not self.revocable[row]
            ):
                by_job.setdefault(task.job, []).append(task)
        return self._within_budget(by_job)

    def _within_budget(self, by_job: dict[str, list[TaskInfo]]) -> list[TaskInfo]:
        chosen = []
        for key, tasks in by_job.items():
            job = self.session.jobs.get(key)
            if job is not None:
                chosen.extend(tasks[: budget(job)])
        return chosen

    def victim_tasks(self) -> list[TaskInfo]:
        """Preemptable running pods on the nodes of zones whose window has closed."""
        now = self.session.now
        last = TdmPlugin._last_shuffle
        if not self.closed_zones or (last is not None and now < last + self.period):
            return []
        by_job: dict[str, list[TaskInfo]] = {}
        for row, zone in enumerate(self.zones):
            if zone in self.closed_zones:
                for task in self.session.nodes.tasks[row].values():
                    if task.job and task.status is TaskStatus.RUNNING and self.task_preemptable(task):
                        by_job.setdefault(task.job, []).append(task)
        TdmPlugin._last_shuffle = now
        return self._within_budget(by_job)

    def job_starving(self, job: JobInfo) -> bool:
        return not self.job_preemptable(job) and bool(job.by_status.get(TaskStatus.PENDING))
