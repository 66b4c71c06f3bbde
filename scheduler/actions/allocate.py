"""allocate: place pending tasks, a gang at a time, all-or-nothing (Volcano's allocate action).

Queues take turns by `queue_order` (an overused queue sits out the rest of the action); each turn
takes the queue's next job by `job_order` and places its pending tasks in `task_order`, each on
`best_node` once `allocatable(queue, task)` agrees. A job's placements are staged in one
Statement, committed once `job_ready` holds and discarded otherwise; a ready job with tasks left
goes back into its queue's heap, so jobs and queues re-sort on their shares as they grow.
Tasks that ask for nothing are left to backfill; tasks with scheduling gates
(`spec.schedulingGates`) are not placed at all. Order keys are computed when an item is pushed.

A job with sub-jobs (its PodGroup's `subGroupPolicy`) is placed a sub-job at a time, each whole
within a node group of its own inside the job's (`_allocate_partitioned`, docs/scheduler.md
"Sub-jobs"); a job without them never takes that path.

A gang costs little when it cannot fit: before placing anything, each placement class's
feasible nodes are asked how many copies they hold (a necessary condition: placements only
fill nodes), and a gang short of its minimum is refused at once; while placing, a class that
found no node (or that the queue refused) is not tried again for that job, and the job stops as
soon as the tasks left cannot make it ready. A refused gang gets Volcano's message:
"<n>/<total> tasks in gang unschedulable: 0/<nodes> nodes are available: <reasons>."
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lahar.api.podgroup import PodGroupPhase
from lahar.scheduler.framework.plugin import Action, register_action
from lahar.scheduler.framework.session import NO_NODE, Session, Statement
from lahar.scheduler.framework.subjobs import Partition, SubJob
from lahar.scheduler.model import JobInfo, QueueInfo, TaskInfo, TaskStatus


@dataclass
class _Pending:
    """A job's tasks still to try, next last (a stack), and its pending tasks that ask for
    nothing (they count towards the gang while backfill places them)."""

    tasks: list[TaskInfo]
    asks_nothing: int


@dataclass
class _Failures:
    """Why a job's tasks did not fit, for its Unschedulable message."""

    nodes: Counter[str] | None = None  # the first class that found no node: reason -> nodes
    queue: int = 0  # tasks the queue would not allocate
    dead: set[Hashable] = field(default_factory=set)  # classes (Session.class_key) refused by the nodes or the queue
    refused: Counter[str] = field(default_factory=Counter)  # placements a plugin undid: reason -> tasks


def nodes_message(reasons: Counter[str], node_count: int) -> str:
    """Kube-scheduler's wording: "0/5 nodes are available: 2 Insufficient cpu, 3 Too many pods."."""
    listed = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
    return f"0/{node_count} nodes are available: {listed}." if listed else f"0/{node_count} nodes are available."


@register_action
class AllocateAction(Action):
    name = "allocate"

    def execute(self, session: Session) -> None:
        _Allocation(session).run()


class _Allocation:
    """One run of the action over a session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.tie = itertools.count()  # heap entries never compare the objects themselves
        self.pending: dict[str, _Pending] = {}
        self.explained: dict[Hashable, Counter[str]] = {}  # per class, when nothing was staged
        self.domain_of: dict[str, Hashable] = {}  # the node group a job became ready in (job_domains)
        self.sub_pending: dict[str, dict[str, list[TaskInfo]]] = {}  # job -> sub-job -> tasks to try

    def _entry(self, key: tuple[Any, ...], item: object) -> tuple[Any, ...]:
        return key, next(self.tie), item

    def run(self) -> None:
        session = self.session
        session.release_reserved()  # nominated tasks whose victims are gone: placed like any other
        enqueue_configured = "enqueue" in session.conf.actions
        waiting: dict[str, list[tuple[Any, ...]]] = {}
        for job in session.jobs.values():
            if job.phase is PodGroupPhase.PENDING:
                if enqueue_configured:
                    continue  # not admitted yet
                job.phase = PodGroupPhase.INQUEUE  # nobody else admits it
            if not job.by_status.get(TaskStatus.PENDING):
                continue
            if job.queue not in session.queues:
                job.set_unschedulable(job.min_member - job.ready_count, f"queue {job.queue} does not exist")
                continue
            reason = session.job_valid(job)
            if reason:
                job.unschedulable_message = reason
                continue
            waiting.setdefault(job.queue, []).append(self._entry(session.job_order_key(job), job))
        queues = []
        for name, jobs in waiting.items():
            heapq.heapify(jobs)
            queues.append(self._entry(session.queue_order_key(session.queues[name]), session.queues[name]))
        heapq.heapify(queues)
        while queues:
            queue: QueueInfo = heapq.heappop(queues)[2]
            jobs = waiting[queue.name]
            if session.overused(queue):
                self._left_in_overused(queue, jobs)
                continue
            job = heapq.heappop(jobs)[2]
            if self._allocate_job(job, queue):
                heapq.heappush(jobs, self._entry(session.job_order_key(job), job))
            if jobs:
                # Alone in the heap, the queue needs no key: nothing is compared with it.
                heapq.heappush(queues, self._entry(session.queue_order_key(queue) if queues else (), queue))

    def _pending_of(self, job: JobInfo) -> _Pending:
        pending = self.pending.get(job.key)
        if pending is None:
            tasks, asks_nothing = [], 0
            candidates = self.session.refuse_unsupported(job, list(job.by_status.get(TaskStatus.PENDING, {}).values()))
            for task in candidates:
                if task.gated:
                    continue  # scheduling gates: nothing places it until they are removed
                if task.no_request:
                    asks_nothing += 1
                else:
                    tasks.append(task)
            if len(tasks) > 1:
                tasks.sort(key=self.session.task_order_key, reverse=True)
            pending = self.pending[job.key] = _Pending(tasks, asks_nothing)
        return pending

    def _allocate_job(self, job: JobInfo, queue: QueueInfo) -> bool:
        """Stage the job's next tasks; commit if the job is ready. True when it is ready with
        tasks left to place in a later turn. A job a plugin keeps within one node group
        (`Session.job_domains`: network-topology-aware's HyperNodes) tries the groups in turn
        until the gang is ready in one; later turns stay in that group."""
        session = self.session
        parts = session.sub_jobs(job)
        if parts is not None:
            return self._allocate_partitioned(job, queue, parts)
        domains = None if job.key in self.domain_of else session.job_domains(job)
        if domains is None:
            return self._allocate_in(job, queue)
        pending = self._pending_of(job)
        tasks = list(pending.tasks)
        ready_before = job.ready_count
        for domain in domains:
            session.enter_domain(job, domain)
            pending.tasks[:] = tasks
            left = self._allocate_in(job, queue)
            # A job ready already (its running tasks) keeps a group only if it placed more there.
            if session.job_ready(job) and job.ready_count > ready_before:
                self.domain_of[job.key] = domain
                return left
        session.enter_domain(job, None)
        pending.tasks.clear()
        if domains and not job.unschedulable_message and not session.job_ready(job):
            job.set_unschedulable(job.min_member - job.ready_count, "no node group the job may use can hold it")
        return False

    def _allocate_in(self, job: JobInfo, queue: QueueInfo) -> bool:
        session = self.session
        pending = self._pending_of(job)
        tasks = pending.tasks
        if not tasks:
            return False
        if not session.job_ready(job) and self._refused_before_placing(job, pending):
            tasks.clear()
            return False
        statement = session.statement()
        failures = _Failures()
        dead_left = 0  # tasks still in `tasks` whose class found no node
        while tasks:
            task = tasks.pop()
            key = session.class_key(task)
            if key in failures.dead:
                dead_left -= 1
                continue
            allowed = session.allocatable(queue, task)
            row = session.best_node(task)  # asked either way: no node is the better reason to give
            if row != NO_NODE and allowed:
                refusal = statement.allocate(task, row)
                if refusal is None:
                    if tasks and session.job_ready(job):
                        break  # ready: let other jobs have a turn before placing more
                    continue
                failures.refused[refusal] += 1  # this task only: a plugin refused it where it fits
            else:
                # Its class will not fit later either: staging only fills nodes and the queue.
                failures.dead.add(key)
                alike = sum(1 for other in tasks if session.class_key(other) == key)
                dead_left += alike
                if row != NO_NODE:
                    failures.queue += 1 + alike
                elif failures.nodes is None:
                    failures.nodes = self._explain(task, cacheable=statement.empty)
            if session.job_ready(job):
                continue  # a ready job places what it can
            possible = job.ready_count + pending.asks_nothing + len(tasks) - dead_left
            if possible < job.min_member:
                break  # the tasks left cannot make it ready
        if session.job_ready(job):
            statement.commit()
            return bool(tasks)
        unready = job.min_member - job.ready_count - pending.asks_nothing
        if not session.job_pipelined(job):
            statement.discard()
        tasks.clear()
        job.set_unschedulable(unready, self._why(queue, failures))
        return False

    # -- sub-jobs -----------------------------------------------------------------------------

    def _allocate_partitioned(self, job: JobInfo, queue: QueueInfo, parts: Partition) -> bool:
        """A job with sub-jobs (its PodGroup's subGroupPolicy, framework/subjobs.py): in each of
        its node groups in turn (as `_allocate_job`; none: anywhere), its sub-jobs are placed one
        at a time, each whole (`subGroupSize` of its tasks) in a group of its own within the
        job's (`Session.sub_job_domains`), those the job needs for its minSubGroups first, until
        the job is ready; then committed. True when it is ready with tasks left."""
        session = self.session
        domains: list[Hashable] | None = (
            [self.domain_of[job.key]] if job.key in self.domain_of else session.job_domains(job)
        )
        left = self._sub_pending_of(job, parts)
        ready_before = job.ready_count
        short: dict[str, tuple[int, int]] = {}  # policies short of minSubGroups in the last group tried
        for domain in [None] if domains is None else domains:
            session.enter_domain(job, domain)
            work = {key: list(tasks) for key, tasks in left.items()}  # each group starts afresh
            statement = session.statement()
            self._place_sub_jobs(job, queue, parts, domain, work, statement)
            short = parts.groups_short(sub_job for sub_job in parts.sub_jobs.values() if sub_job.ready(job))
            if session.job_ready(job) and job.ready_count > ready_before:
                statement.commit()
                self.domain_of[job.key] = domain
                left.clear()
                left.update((key, tasks) for key, tasks in work.items() if tasks)
                self._leave_sub_domains(job, parts)
                return bool(left)
            if not session.job_ready(job) and session.job_pipelined(job):
                left.clear()  # pipelined: kept staged for a later cycle, as `_allocate_in` does
                self._leave_sub_domains(job, parts)
                return False
            statement.discard()
        session.enter_domain(job, None)
        self._leave_sub_domains(job, parts)
        left.clear()
        if not session.job_ready(job):
            reasons = [
                f"{have} of the {need} sub-groups of policy {name or '(unnamed)'} could be placed whole"
                for name, (have, need) in sorted(short.items())
            ]
            if job.unschedulable_message:  # the plugin's reason (no HyperNode for a sub-job, ...)
                reasons.append(job.unschedulable_message)
            job.set_unschedulable(
                job.min_member - job.ready_count, "; ".join(reasons) or "its sub-jobs cannot be placed whole"
            )
        return False

    def _sub_pending_of(self, job: JobInfo, parts: Partition) -> dict[str, list[TaskInfo]]:
        """Per sub-job, its tasks still to try (next last), kept across the job's turns."""
        found = self.sub_pending.get(job.key)
        if found is None:
            found = self.sub_pending[job.key] = {}
            session = self.session
            for key, sub_job in parts.sub_jobs.items():
                tasks = [
                    task
                    for task in session.refuse_unsupported(job, sub_job.pending(job))
                    if not task.gated and not task.no_request  # as `_pending_of`: backfill's
                ]
                if tasks:
                    tasks.sort(key=session.task_order_key, reverse=True)
                    found[key] = tasks
        return found

    def _place_sub_jobs(
        self,
        job: JobInfo,
        queue: QueueInfo,
        parts: Partition,
        domain: Hashable,
        work: dict[str, list[TaskInfo]],
        statement: Statement,
    ) -> None:
        """Place sub-jobs within the job's group `domain` until the job is ready. Volcano's
        order: the sub-jobs each policy still needs for its minSubGroups first, then those not
        ready, by name; a placed sub-job with tasks left goes to the back, a failed one is done."""
        turns = deque(parts.turn_order(job, work))
        while turns:
            key = turns.popleft()
            if self._place_sub_job(job, queue, parts.sub_jobs[key], domain, work[key], statement):
                if work[key]:
                    turns.append(key)
                if self.session.job_ready(job):
                    return
            else:
                work[key] = []

    def _place_sub_job(
        self,
        job: JobInfo,
        queue: QueueInfo,
        sub_job: SubJob,
        domain: Hashable,
        tasks: list[TaskInfo],
        statement: Statement,
    ) -> bool:
        """Place `sub_job`'s next tasks until it is ready, in the first of its groups where it
        becomes ready (or pipelined); its placements join `statement`. False when none holds it."""
        session = self.session
        sub_domains = session.sub_job_domains(job, sub_job, domain)
        for sub_domain in [None] if sub_domains is None else sub_domains:
            session.enter_sub_domain(job, sub_job, sub_domain)
            trial = session.statement()
            left = list(tasks)
            while left:
                task = left.pop()
                if not session.allocatable(queue, task):
                    continue
                row = session.best_node(task)
                if row != NO_NODE:
                    trial.allocate(task, row)
                    if sub_job.ready(job):
                        break
                elif sub_job.size >= len(sub_job.uids):
                    break  # it needs every task: one that fits nowhere sinks it
            if not trial.empty and (sub_job.ready(job) or sub_job.pipelined(job)):
                statement.absorb(trial)
                tasks[:] = left
                return True
            trial.discard()
        session.enter_sub_domain(job, sub_job, None)
        return False

    def _leave_sub_domains(self, job: JobInfo, parts: Partition) -> None:
        for sub_job in parts.sub_jobs.values():
            self.session.enter_sub_domain(job, sub_job, None)

    # -- refusing early ----------------------------------------------------------------------

    def _refused_before_placing(self, job: JobInfo, pending: _Pending) -> bool:
        """Refuse a gang whose placement classes cannot hold its minimum even on their own
        (sets the job's message); False when it may fit. Not worth it for one task."""
        session = self.session
        need = job.min_member - job.ready_count - pending.asks_nothing
        if need <= 1:
            return False
        classes: dict[Hashable, tuple[TaskInfo, int]] = {}
        for task in pending.tasks:
            key = session.class_key(task)
            first, count = classes.get(key, (task, 0))
            classes[key] = (first, count + 1)
        possible = 0
        short: tuple[TaskInfo, np.ndarray, np.ndarray] | None = None
        for task, count in classes.values():
            rows = np.flatnonzero(session.candidate_scores(task) > -np.inf)
            copies = session.nodes.copies(task, rows, session.be_capacity)
            if not copies.all():
                return False  # feasible nodes without room: no predicate checks resources here
            held = int(copies.sum())
            possible += min(count, held)
            if possible >= need:
                return False
            if short is None and held < count:
                short = (task, rows, copies)
        if short is None:
            return False  # fewer tasks pending than needed: pipelined ones make up the rest
        task, rows, copies = short
        # Once its feasible nodes hold all the copies they can, each is short of something.
        reasons = self._explain(task, cacheable=True).copy()
        nodes = session.nodes
        reasons.update(
            nodes.shortfall(task, nodes.free(task, rows, session.be_capacity) - copies[:, None] * task.request)
        )
        job.set_unschedulable(need - possible, nodes_message(reasons, len(nodes)))
        return True

    def _explain(self, task: TaskInfo, cacheable: bool) -> Counter[str]:
        """session.explain, once per placement class while nothing of the job is staged (the
        nodes may fill meanwhile; the message names the reasons, not a ledger)."""
        if not cacheable:
            return self.session.explain(task)
        key = self.session.class_key(task)
        reasons = self.explained.get(key)
        if reasons is None:
            reasons = self.explained[key] = self.session.explain(task)
        return reasons

    def _why(self, queue: QueueInfo, failures: _Failures) -> str:
        parts = []
        if failures.nodes is not None:
            parts.append(nodes_message(failures.nodes, len(self.session.nodes)))
        if failures.queue:
            parts.append(
                f"{failures.queue} task(s) would exceed queue {queue.name}'s deserved share"
                if queue.is_open
                else f"queue {queue.name} is {queue.state.value}"
            )
        parts.extend(f"{count} task(s) refused at placement: {reason}" for reason, count in failures.refused.items())
        return "; ".join(parts) or "the tasks left cannot make the gang ready"

    def _left_in_overused(self, queue: QueueInfo, jobs: list[tuple[Any, ...]]) -> None:
        """The jobs an overused queue will not get to this session."""
        for _, _, job in jobs:
            unready = job.min_member - job.ready_count - self._pending_of(job).asks_nothing
            if unready > 0:
                job.set_unschedulable(unready, f"queue {queue.name} is overused")
        jobs.clear()
