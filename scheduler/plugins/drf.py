"""drf: Dominant Resource Fairness between jobs (Volcano's drf plugin), and hierarchical DRF
between queues with `enableHierarchy: true` (Volcano's hdrf).

A job's share is its largest fraction of any cluster resource (pod slots left out); jobs with
the smaller dominant share go first, and a preemptor may take a victim only if its share after
the placement stays below (or equal to) the victim job's share after the eviction. Shares are
kept current through the session's allocate/deallocate handlers.

With `enableHierarchy: true`, queues are ordered by hierarchical DRF over the tree their
annotations `volcano.sh/hierarchy` and `volcano.sh/hierarchy-weights` describe
(`framework/hdrf.py` holds the tree and Volcano's rules); the tree is rebuilt after each change
of the jobs' allocations, so the order follows the placements (cost: the jobs, per queue turn).
Reclaim, as Volcano's hdrf filter: with the reclaimer's task counted as placed, a candidate is a
victim when, with that one task evicted, the reclaimer's queue comes strictly before the
candidate's in the hierarchical order (one tree per candidate: cost the jobs, per candidate).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from lahar.scheduler.framework import hdrf
from lahar.scheduler.framework.plugin import Plugin, register_plugin
from lahar.scheduler.framework.session import Session
from lahar.scheduler.model import CHARGED, JobInfo, QueueInfo, TaskInfo, TaskStatus

SHARE_DELTA = 1e-6  # Volcano's shareDelta: shares this close count as equal


@register_plugin
class DrfPlugin(Plugin):
    name = "drf"
    SWITCHES_HONOURED = frozenset({"enableHierarchy", "enabledHierarchy"})

    def on_session_open(self, session: Session) -> None:
        self.session = session
        total = session.total.astype(np.float64)
        columns = session.resources.quota_columns
        columns = columns[total[columns] > 0]  # a resource the cluster lacks is nobody's share
        self._columns, self._total = columns, total[columns]
        self._allocated: dict[str, np.ndarray] = {}
        session.add_job_order_fn(self._job_share)
        session.add_preemptable_fn(self.victims)
        session.add_event_handler(self._allocate, self._deallocate)
        self._tree: hdrf.Node | None = None
        if self.switches_on & self.SWITCHES_HONOURED:
            session.add_queue_order_fn(self.queue_key)
            session.add_reclaimable_fn(self.hierarchical_victims)

    def queue_key(self, queue: QueueInfo) -> tuple[tuple[bool, float], ...]:
        """Hierarchical DRF: the queue's (saturated, share / weight) down its path."""
        if self._tree is None:
            self._tree = self._build_tree({})
        return hdrf.order_key(self._tree, self._path(queue.name))

    def _build_tree(self, changes: Mapping[str, np.ndarray]) -> hdrf.Node:
        """The hdrf tree over the jobs' allocations, each job in `changes` holding that much more."""
        columns, jobs = self._columns, self.session.jobs
        every = tuple(TaskStatus)
        leaves = [
            hdrf.Leaf(
                key,
                self._path(job.queue),
                (self._of(key) + changes[key] if key in changes else self._of(key))[columns],
                job.requested(every)[columns],
            )
            for key, job in jobs.items()
            if job.queue in self.session.queues
        ]
        return hdrf.build(leaves, self._total)

    def hierarchical_victims(self, reclaimer: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        """Volcano's hdrf reclaim filter (see the module's note); a task whose job or queue the
        session lacks is no victim."""
        jobs, queues = self.session.jobs, self.session.queues
        own = jobs.get(reclaimer.job)
        if own is None or own.queue not in queues:
            return []
        own_path = self._path(own.queue)
        chosen = []
        for victim in candidates:
            job = jobs.get(victim.job)
            if job is None or job.queue not in queues:
                continue
            changes = {reclaimer.job: reclaimer.request.copy()}
            changes[victim.job] = changes.get(victim.job, np.zeros_like(victim.request)) - victim.request
            if hdrf.compare(self._build_tree(changes), own_path, self._path(job.queue)) < 0:
                chosen.append(victim)
        return chosen

    def _path(self, name: str) -> list[tuple[str, float]]:
        queue = self.session.queues[name].queue
        return hdrf.queue_path(queue.meta.annotations if queue is not None else {})

    def _of(self, job_key: str) -> np.ndarray:
        allocated = self._allocated.get(job_key)
        if allocated is None:
            allocated = self._allocated[job_key] = self.session.jobs[job_key].requested(CHARGED)
        return allocated

    def _job_share(self, job: JobInfo) -> float:
        """The job's dominant share (its job order key); 0 for a job that holds nothing, without
        counting it (most of a backlog)."""
        if job.key not in self._allocated and not job.count(CHARGED):
            return 0.0
        return self.share(self._of(job.key))

    def share(self, allocated: np.ndarray) -> float:
        if not len(self._columns):
            return 0.0
        return float((allocated[self._columns] / self._total).max())

    def _allocate(self, task: TaskInfo) -> None:
        self._tree = None
        if task.job in self._allocated:  # otherwise counted from the job when first asked
            self._allocated[task.job] += task.request

    def _deallocate(self, task: TaskInfo) -> None:
        self._tree = None
        if task.job in self._allocated:
            self._allocated[task.job] -= task.request

    def victims(self, preemptor: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        preemptor_share = self.share(self._of(preemptor.job) + preemptor.request)
        left: dict[str, np.ndarray] = {}
        chosen = []
        for victim in candidates:
            remaining = left.get(victim.job)
            if remaining is None:
                remaining = self._of(victim.job).copy()
            remaining = left[victim.job] = remaining - victim.request
            victim_share = self.share(remaining)
            if preemptor_share < victim_share or abs(preemptor_share - victim_share) <= SHARE_DELTA:
                chosen.append(victim)
        return chosen
