"""task-topology: affinity and anti-affinity between the tasks of one job, as node scores, and the
order its tasks are placed in (Volcano's task-topology plugin, its annotations and argument).

A job says, on its PodGroup (a Volcano Job's annotations are copied there):

- `volcano.sh/task-topology-affinity: "ps,worker;chief"`: groups separated by `;`, tasks of one
  group want to share nodes (a group of one task: its pods want to be together);
- `volcano.sh/task-topology-anti-affinity: "ps;worker,chief"`: tasks of a group want apart (a
  group of one: its pods spread over nodes);
- `volcano.sh/task-topology-task-order: "ps,worker,chief"`: place the tasks in this order.

Scores: for a pod of task T, each node scores `weight × 100 × (affine − anti) / n`, where
`affine` counts the job's pods on the node (placed, binding or running) whose task is in an
affinity group with T, `anti` those in an anti-affinity group with T, and `n` is the job's pod
count, so a node holding the whole job scores ±100 × weight. Task order: tasks named in
the order annotation first, in its order; then tasks named in an affinity or anti-affinity group,
interleaved by pod index (`ps-0, worker-0, ps-1, …`); then the rest. Argument: `task-topology.weight` (1).

Volcano places by "buckets" (it packs affine tasks into node-sized groups ahead of time); Lahar
scores the nodes directly from what the job already holds there, with the same preferences and
no bucket heuristic. The score depends on the job, so the plugin declares it
(`Session.add_class_key_fn`): pods of two jobs with the same spec never share cached scores. An
annotation naming a task the job does not have is reported (a Warning event `InvalidTaskTopology`
on the PodGroup) and the job's topology is ignored, as Volcano ignores it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from lahar.scheduler.framework.plugin import Arguments, Plugin, number, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import CHARGED, JobInfo, NodeTable, Rows, TaskInfo, TaskStatus

AFFINITY = "volcano.sh/task-topology-affinity"
ANTI_AFFINITY = "volcano.sh/task-topology-anti-affinity"
TASK_ORDER = "volcano.sh/task-topology-task-order"
MAX_SCORE = 100.0


class TopologyError(ValueError):
    pass


def _groups(text: str, tasks: set[str], annotation: str) -> list[list[str]]:
    groups = []
    for part in text.split(";"):
        group = [name.strip() for name in part.split(",") if name.strip()]
        for name in group:
            if name not in tasks:
                raise TopologyError(f"{annotation}: task {name!r} is not a task of the job")
        if len(set(group)) != len(group):
            raise TopologyError(f"{annotation}: a task appears twice in {part!r}")
        if group:
            groups.append(group)
    return groups


def _pairs(groups: list[list[str]]) -> dict[str, set[str]]:
    """Task -> the tasks it relates to (itself, for a group of one)."""
    related: dict[str, set[str]] = {}
    for group in groups:
        for name in group:
            related.setdefault(name, set()).update(group if len(group) > 1 else [name])
            if len(group) > 1:
                related[name].discard(name)
    return related


@dataclass
class JobTopology:
    affinity: dict[str, set[str]]
    anti_affinity: dict[str, set[str]]
    order: dict[str, int]
    size: int
    on_node: dict[str, np.ndarray] = field(default_factory=dict)  # task name -> pods per node row


def read_topology(job: JobInfo) -> JobTopology | None:
    """The job's task topology, None when its PodGroup says nothing; TopologyError when it names
    tasks the job does not have."""
    notes = {} if job.podgroup is None else job.podgroup.meta.annotations
    if not any(key in notes for key in (AFFINITY, ANTI_AFFINITY, TASK_ORDER)):
        return None
    tasks = {task.task_name for task in job.tasks.values()}
    affinity = _pairs(_groups(notes.get(AFFINITY, ""), tasks, AFFINITY))
    anti = _pairs(_groups(notes.get(ANTI_AFFINITY, ""), tasks, ANTI_AFFINITY))
    order_groups = _groups(notes.get(TASK_ORDER, "").replace(";", ","), tasks, TASK_ORDER)
    order = {name: i for i, name in enumerate(order_groups[0] if order_groups else [])}
    return JobTopology(affinity, anti, order, max(len(job.tasks), 1))


@register_plugin
class TaskTopologyPlugin(Plugin):
    name = "task-topology"
    ARGUMENTS: ClassVar[Arguments] = {"task-topology.weight": number(minimum=0)}

    def on_session_open(self, session: Session) -> None:
        self.session = session
        self.weight = self.argument("task-topology.weight", 1.0)
        self.jobs: dict[str, JobTopology] = {}
        for job in session.jobs.values():
            if not job.by_status.get(TaskStatus.PENDING) or job.podgroup is None:
                continue
            try:
                topology = read_topology(job)
            except TopologyError as exc:
                session.record_event("PodGroup", job.namespace, job.name, "Warning", "InvalidTaskTopology", str(exc))
                continue
            if topology is not None:
                self.jobs[job.key] = topology
                self._count(job, topology)
        if not self.jobs:
            return  # nothing to do: no callback, no cost per placement
        session.add_task_order_fn(self.task_order)
        session.add_class_key_fn(self.class_key)
        session.add_event_handler(self._allocated, self._deallocated)
        if self.weight:
            # Only a job with a topology scores (the class key keeps such jobs apart).
            session.add_node_order_fn(self.score, applies=lambda task: task.job in self.jobs)

    def _count(self, job: JobInfo, topology: JobTopology) -> None:
        index, rows = self.session.nodes.index, len(self.session.nodes)
        for task in job.tasks.values():
            row = index.get(task.node) if task.node else None
            if row is not None and task.status in CHARGED:
                topology.on_node.setdefault(task.task_name, np.zeros(rows, dtype=np.int64))[row] += 1

    def class_key(self, task: TaskInfo) -> Hashable:
        """Scores of a job with a topology are its own."""
        return task.job if task.job in self.jobs else None

    def task_order(self, task: TaskInfo) -> tuple[int, int]:
        """Sort key: the order annotation, then affine tasks by pod index, then the rest."""
        topology = self.jobs.get(task.job)
        if topology is None:
            return (2, 0)
        name = task.task_name
        if name in topology.order:
            return (0, topology.order[name])
        # Affine tasks interleave by pod index (ps-0, worker-0, ps-1, ...), so each pod finds its
        # partners placed just before it and the node they share still has room.
        return (1, task.index) if name in topology.affinity or name in topology.anti_affinity else (2, 0)

    def _moved(self, task: TaskInfo, sign: int) -> None:
        topology = self.jobs.get(task.job)
        row = self.session.row_of(task) if topology is not None else None
        if topology is None or row is None:
            return
        counts = topology.on_node.get(task.task_name)
        if counts is None:
            counts = topology.on_node[task.task_name] = np.zeros(len(self.session.nodes), dtype=np.int64)
        counts[row] += sign

    def _allocated(self, task: TaskInfo) -> None:
        self._moved(task, 1)

    def _deallocated(self, task: TaskInfo) -> None:
        self._moved(task, -1)

    def score(self, task: TaskInfo, nodes: NodeTable, rows: Rows) -> np.ndarray:
        total = np.zeros(len(nodes.schedulable[rows]), dtype=np.float64)
        topology = self.jobs.get(task.job)
        if topology is None:
            return total
        name = task.task_name
        for related, sign in ((topology.affinity.get(name, ()), 1.0), (topology.anti_affinity.get(name, ()), -1.0)):
            for other in related:
                counts = topology.on_node.get(other)
                if counts is not None:
                    total += sign * counts[rows]
        return total * (self.weight * MAX_SCORE / topology.size)
