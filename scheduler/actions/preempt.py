"""preempt: starving jobs take resources from lower-priority tasks of their own queue (Volcano's
preempt action).

For every queue (queue order) and every starving job in it (job order), each pending task (task
order) looks for a node where it would fit once victims are gone: running or bound tasks of
other jobs in the same queue whose job has a lower priority, as `Session.preemptable` allows
(a BE task never preempts a non-BE one). Victims go lowest first (reverse job order, then
reverse task order) and only until the task fits, on the future state (what the evicted tasks
free) and the queue allows it (`Session.allocatable`); then the task is pipelined there. The
job's evictions and pipelines are committed only if the job is then pipelined
(`Session.job_pipelined`), else undone. A job with a hard `networkTopology` makes its room within
one HyperNode: its victims and its pipelined tasks are kept to one candidate HyperNode at a time
(`in_one_domain`, best first), as Volcano's topology-aware gang eviction; a job with sub-jobs
makes it a sub-job at a time, each within a HyperNode of its own (`make_room`). A second phase lets
pending tasks of a starving job preempt lower-priority running tasks of the same job, one task at
a time.

Lahar only ever preempts downwards: a victim's job priority (or, within a job, its task
priority) must be strictly lower than the preemptor's, whatever the preemptable callbacks say.
That makes preemption loops impossible and lets one vector operation bound every node at once.

Speed (DESIGN.md, "Performance"): `VictimPool` keeps, per kind of preemptor, the per-node sum of
the requests of every task it could evict, updated as victims are evicted or restored, so each
preemptor is checked against all nodes with a few numpy operations ("does it fit if all of them
went?", through the one fit rule on a `NodeTable.what_if` view); every predicate is asked once
per placement class about an empty what-if view (devices and NUMA answer by capacity there; pod
anti-affinity and host ports do not count the node's own pods, which victims could be) and
cached by the session like allocate's scores, and again, about the future state, on the node
finally chosen. The pods whose presence refuses the task on a node (anti-affinity either way, a
host port) are its first victims there (`Session.blocking`), as kube-scheduler's preemption
removes them whatever they free; a node where one of them may not be evicted is passed over.
Only the best-scored nodes that pass both are examined one by one (at most
`maxCandidateNodes`, default 100), nodes where the task fits without new victims first. A
node that failed a kind of task (victim selection and placement class) is not tried again for
that kind until it changes, and a kind that found no node at all waits until some node changes:
the victim filters of the default plugins (priority, gang, proportion) answer the same for every
task of a kind. `reclaim` uses the same machinery with a different victim set.

A gang that cannot be pipelined whole costs little (`VictimSearch.can_hold`): before its tasks
are tried one by one (each pipelined, then all undone), each placement class is asked how many
copies the nodes it passes would hold with every victim the job may take gone (and every task
being evicted); a gang whose classes cannot hold the tasks it still needs is skipped at once.
This is a necessary condition (victim filters only take victims away), as allocate's own.
A preemptor the queue refuses before any eviction (`Session.allocatable`) is tried on every
candidate node as any other: evicting victims of its own queue gives the queue room back, and
which victims a node holds decides whether enough comes back. A node where the task fits as it
is and that holds none of its victims is left to allocate (Volcano's actions skip a node without
victims); room that only the tasks being evicted will free is taken (a preemptor pipelined last
cycle finds its victims' node again).

Whatever the plugins, the actions never evict a pod or a PodGroup's pods marked
`volcano.sh/preemptable: "false"`, never leave a running gang below its minMember (a gang at its
minimum goes whole or not at all, `VictimSearch._evict_until_fits`), and never preempt for a
task whose `preemptionPolicy` is Never or that still has scheduling gates (`preemptors`), nor for
a queue that is not Open.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from functools import partial
from typing import Any, ClassVar

import numpy as np

from lahar.api.podgroup import PodGroupPhase
from lahar.api.qos import QoSClass
from lahar.scheduler.framework.plugin import Action, Arguments, number, register_action
from lahar.scheduler.framework.session import SOFT_SHARD_PENALTY, Session, Statement
from lahar.scheduler.model import READY, JobInfo, NodeTable, QueueInfo, TaskInfo, TaskStatus

# The tasks an action may evict: running, or bound and about to run.
EVICTABLE = (TaskStatus.RUNNING, TaskStatus.BOUND)
# Nodes examined one by one per task, best-scored first (Volcano's maxCandidateNodesAbsolute).
DEFAULT_MAX_CANDIDATE_NODES = 100
NO_VICTIMS = ("no victims",)  # the selection key of VictimPool.nothing
NEVER = -1  # a change mark before any

Victims = Callable[[TaskInfo, list[TaskInfo]], list[TaskInfo]]  # Session.preemptable or .reclaimable


def starving_jobs(session: Session) -> dict[str, list[JobInfo]]:
    """Jobs that want more than they hold, by queue, each list in job order (Volcano skips jobs
    still Pending admission, invalid jobs and jobs of unknown queues). A queue that is not Open
    gets nothing placed, so its jobs evict nobody, whatever the plugins say."""
    by_queue: dict[str, list[JobInfo]] = {}
    for job in session.jobs.values():
        queue = session.queues.get(job.queue)
        if (
            job.phase is PodGroupPhase.PENDING
            or queue is None
            or not queue.is_open
            or not job.by_status.get(TaskStatus.PENDING)
            or session.job_valid(job)
        ):
            continue
        if session.job_starving(job):
            by_queue.setdefault(job.queue, []).append(job)
    for jobs in by_queue.values():
        jobs.sort(key=session.job_order_key)
    return by_queue


def still_needed(job: JobInfo) -> int:
    """How many more of the job's tasks must be placed or pipelined for it to be pipelined:
    minMember less the ready and pipelined ones and the pending ones that ask for nothing (the
    gang plugin's count, which decides `job_pipelined`)."""
    asks_nothing = sum(1 for task in job.with_status(TaskStatus.PENDING) if task.no_request)
    return job.min_member - job.count(READY) - job.count((TaskStatus.PIPELINED,)) - asks_nothing


def preemptors(session: Session, job: JobInfo) -> list[TaskInfo]:
    """The job's pending tasks that may take others' place, in task order: not those whose
    PriorityClass says `preemptionPolicy: Never`, nor those still behind scheduling gates."""
    return sorted(
        (
            task
            for task in job.with_status(TaskStatus.PENDING)
            if not task.never_preempts and not task.gated and not session.unsupported(task)
        ),
        key=session.task_order_key,
    )


def may_be_victim(job: JobInfo, task: TaskInfo) -> bool:
    """Whether neither the pod nor its PodGroup opted out of eviction (`volcano.sh/preemptable`),
    and the pod is not critical to the cluster (the conformance plugin's rule, held whatever the
    plugins: Volcano lets a later tier decide when a tier answers no victims at all): the pod's
    part is `TaskInfo.spared`, read once when the task is made."""
    return not task.spared and job.preemptable


def possible_victims(jobs: Iterable[JobInfo], may_lose: Callable[[JobInfo], bool]) -> Iterator[TaskInfo]:
    """The running or bound tasks of the jobs `may_lose` picks that `may_be_victim` allows, job
    by job (what `VictimPool` holds)."""
    for job in jobs:
        if may_lose(job) and job.preemptable:
            for task in job.with_status(*EVICTABLE):
                if not task.spared:
                    yield task


def queues_in_order(session: Session, names: Iterable[str]) -> list[QueueInfo]:
    """The named queues in queue order."""
    return sorted((session.queues[name] for name in names), key=session.queue_order_key)


class VictimPool:
    """Tasks an action may evict, as arrays, with the per-node sums of their requests for each
    selection of them an action asked about (`select`). The sums follow the session: a task the
    session evicts leaves them, one whose eviction is undone comes back."""

    def __init__(self, session: Session, tasks: Iterable[TaskInfo]) -> None:
        # One pass over the tasks (a wave's every cycle builds a pool of thousands), what is the
        # job's read once per run of its tasks.
        index, jobs = session.nodes.index, session.jobs
        self.session = session
        self._job_codes: dict[str, int] = {}
        self._queue_codes: dict[str, int] = {}
        listed: list[TaskInfo] = []
        rows: list[int] = []
        columns: tuple[list[Any], ...] = ([], [], [], [], [])  # BE, task priority, job priority, job, queue
        best_effort, task_priority, job_priority, job_code, queue_code = columns
        last_job, of_job = "", (0, 0, 0)
        for task in tasks:
            row = index.get(task.node)
            if row is None:
                continue
            if task.job != last_job:
                job, last_job = jobs[task.job], task.job
                of_job = (
                    job.priority,
                    self._job_codes.setdefault(task.job, len(self._job_codes)),
                    self._queue_codes.setdefault(job.queue, len(self._queue_codes)),
                )
            listed.append(task)
            rows.append(row)
            best_effort.append(task.qos is QoSClass.BE)
            task_priority.append(task.priority)
            job_priority.append(of_job[0])
            job_code.append(of_job[1])
            queue_code.append(of_job[2])
        self._index = {task.uid: i for i, task in enumerate(listed)}
        self.rows = np.array(rows, dtype=np.intp)
        self.requests = (
            np.stack([task.request for task in listed])
            if listed
            else np.zeros((0, len(session.resources)), dtype=np.int64)
        )
        self.best_effort = np.array(best_effort, dtype=bool)
        self.task_priority = np.array(task_priority, dtype=np.int64)
        self.job_priority = np.array(job_priority, dtype=np.int64)
        self.job = np.array(job_code, dtype=np.int64)
        self.queue = np.array(queue_code, dtype=np.int64)
        self.available = np.ones(len(listed), dtype=bool)
        self._selections: dict[Hashable, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        session.add_event_handler(self._restored, self._evicted)

    def nothing(self) -> np.ndarray:
        """The empty selection."""
        return np.zeros(len(self.available), dtype=bool)

    def job_code(self, job: str) -> int:
        return self._job_codes.get(job, -1)

    def queue_code(self, queue: str) -> int:
        return self._queue_codes.get(queue, -1)

    @property
    def queue_names(self) -> set[str]:
        """The queues of the tasks in the pool."""
        return set(self._queue_codes)

    def queue_mask(self, names: Iterable[str]) -> np.ndarray:
        """Which pool tasks belong to one of the queues `names`."""
        codes = [self._queue_codes[name] for name in names if name in self._queue_codes]
        return np.isin(self.queue, codes)

    def select(self, key: Hashable, selection: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per-node requests of the non-BE and of the BE tasks still in the pool that
        `selection()` (a mask over the pool, computed once per key) picks."""
        entry = self._selections.get(key)
        if entry is None:
            mask = selection()
            shape = (len(self.session.nodes), self.requests.shape[1])
            freed, be_freed = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
            live = mask & self.available
            for sums, which in ((freed, live & ~self.best_effort), (be_freed, live & self.best_effort)):
                np.add.at(sums, self.rows[which], self.requests[which])
            entry = self._selections[key] = (mask, freed, be_freed)
        return entry[1], entry[2]

    def selected(self, key: Hashable, task: TaskInfo) -> bool:
        """Whether `task` is still in the pool and in the selection `key` (asked before)."""
        i = self._index.get(task.uid)
        return i is not None and bool(self.available[i]) and bool(self._selections[key][0][i])

    def _shift(self, i: int, sign: int) -> None:
        self.available[i] = sign > 0
        for mask, freed, be_freed in self._selections.values():
            if mask[i]:
                (be_freed if self.best_effort[i] else freed)[self.rows[i]] += sign * self.requests[i]

    def _evicted(self, task: TaskInfo) -> None:
        i = self._index.get(task.uid)
        if i is not None and task.status is TaskStatus.RELEASING and self.available[i]:
            self._shift(i, -1)

    def _restored(self, task: TaskInfo) -> None:
        i = self._index.get(task.uid)
        if i is not None and task.status in EVICTABLE and not self.available[i]:
            self._shift(i, +1)


class _Bound:
    """A what-if view with one selection of victims gone, kept current with the session, and per
    placement class the rows where the class fits on it."""

    def __init__(self, view: NodeTable, mark: int) -> None:
        self.view = view
        self.mark = mark
        self.fits: dict[str, tuple[np.ndarray, int]] = {}


class _Failures:
    """Where one kind of task found no victims to fit it: per node the change mark when it last
    failed there (a node is tried again once it changed after that), and the mark when the kind
    last found no node at all."""

    def __init__(self, nodes: int) -> None:
        self.at = np.full(nodes, NEVER, dtype=np.int64)
        self.some = False
        self.nothing_at = NEVER


class VictimSearch:
    """Finds a node for one task by evicting victims there, and pipelines the task on it."""

    def __init__(self, session: Session, pool: VictimPool, reason: str, max_nodes: int) -> None:
        self.session = session
        self.pool = pool
        self.reason = reason
        self.max_nodes = max_nodes
        # gangpreempt's and gangreclaim's arguments: candidate HyperNodes tried per job (None: all),
        # and whether a victim gang at its minMember may be taken whole.
        self.max_domains: int | None = None
        self.allow_whole = True
        # Predicates asked about nodes with nothing on them: everything but usage, per class.
        self._empty = session.nodes.what_if(empty=True)
        # The nodes once the tasks being evicted are gone (the bound of NO_VICTIMS), kept current.
        self._future = session.nodes.what_if()
        self._bounds: dict[Hashable, _Bound] = {}
        # When each node last changed (a change mark), and what failed each kind of task
        # (victim selection, placement class).
        self._mark = 0
        self._last_change = np.zeros(len(session.nodes), dtype=np.int64)
        self._failures: dict[tuple[Hashable, Hashable], _Failures] = {}

    def _bound(self, key: Hashable, selection: Callable[[], np.ndarray]) -> _Bound:
        """The nodes with every victim of the selection gone, brought up to date (`_sync` must
        have run)."""
        bound = self._bounds.get(key)
        if bound is None:
            freed, be_freed = self.pool.select(key, selection)
            view = self._future if key == NO_VICTIMS else self.session.nodes.what_if(freed, be_freed)
            bound = self._bounds[key] = _Bound(view, self._mark)
        elif bound.mark < self._mark:
            bound.view.refresh(self._changed_after(bound.mark))
            bound.mark = self._mark
        return bound

    def _fits_without_victims(self, task: TaskInfo, key: Hashable, selection: Callable[[], np.ndarray]) -> np.ndarray:
        """Per node, whether `task` would fit if every victim of the selection there were gone:
        computed once per selection and class, then only on the nodes that changed (`_sync`
        must have run)."""
        be_capacity = self.session.be_capacity
        bound = self._bound(key, selection)
        known = bound.fits.get(task.placement)
        if known is None:
            mask = bound.view.fits(task, slice(None), be_capacity)
        else:
            mask, mark = known
            if mark < self._mark:
                rows = self._changed_after(mark)
                mask[rows] = bound.view.fits(task, rows, be_capacity)
        bound.fits[task.placement] = (mask, self._mark)
        return mask

    def can_hold(
        self,
        tasks: list[TaskInfo],
        need: int,
        selection_of: Callable[[TaskInfo], tuple[Hashable, Callable[[], np.ndarray]]],
    ) -> bool:
        """Whether `need` of `tasks` might be placed by this search (module docstring): False when
        the nodes each placement class passes the predicates on cannot hold that many copies
        with every victim of the class's selection (`selection_of(task)`: key, selection) gone."""
        if need <= 1:
            return True  # one task: the node search answers as fast
        self._sync()
        classes: dict[Hashable, tuple[TaskInfo, int]] = {}
        for task in tasks:
            key = self.session.class_key(task)
            first, count = classes.get(key, (task, 0))
            classes[key] = (first, count + 1)
        held = 0
        for key, (task, count) in classes.items():
            view = self._bound(*selection_of(task)).view
            feasible = np.flatnonzero(self.session.candidate_scores(task, self._empty, ("victims", key)) > -np.inf)
            held += min(count, int(view.copies(task, feasible, self.session.be_capacity).sum()))
            if held >= need:
                return True
        return False

    def place(
        self,
        task: TaskInfo,
        selection_key: Hashable,
        selection: Callable[[], np.ndarray],
        also: Callable[[TaskInfo], bool],
        victims_of: Victims,
        enough: Callable[[], bool],
    ) -> Statement | None:
        """Evict victims on one node until `task` fits there, and pipeline it: the statement that
        did so, or None (nothing changed). Victims are the pool's `selection` that pass `also`,
        as `victims_of(task, candidates)` allows; `enough()` must also hold before the task is
        pipelined (the queue's say)."""
        session, nodes = self.session, self.session.nodes
        self._sync()
        key = session.class_key(task)
        failures = self._failures.get((selection_key, key))
        if failures is None:
            failures = self._failures[(selection_key, key)] = _Failures(len(nodes))
        elif failures.nothing_at == self._mark:
            return None  # the same kind of task found nothing, and no node has changed since
        bound = self._fits_without_victims(task, selection_key, selection)
        scores = np.where(bound, session.candidate_scores(task, self._empty, ("victims", key)), -np.inf)
        if failures.some:  # nodes that failed this kind of task and have not changed since
            scores[failures.at >= self._last_change] = -np.inf
        # Nodes where the task fits once what is already being evicted is gone come first: no
        # new victims there (a task pipelined last cycle finds its victims' node again).
        preferred = np.where(self._fits_without_victims(task, NO_VICTIMS, self.pool.nothing), scores, -np.inf)
        # A task the queue refuses as things stand may be allowed once victims of its own queue
        # are gone on another node: every candidate node is tried (Volcano's rule).
        for _ in range(self.max_nodes):
            row = int(np.argmax(preferred))
            # A node outside a soft shard comes after every node of the shard, preferred or not.
            if preferred[row] == -np.inf or (
                session.soft_sharded and scores.max() - preferred[row] >= SOFT_SHARD_PENALTY / 2
            ):
                row = int(np.argmax(scores))
                if scores[row] == -np.inf:
                    return None
            candidates = self._lowest_first(
                [
                    victim
                    for victim in nodes.tasks[row].values()
                    if victim.status in EVICTABLE and self.pool.selected(selection_key, victim) and also(victim)
                ]
            )
            candidates, blocking = self._blockers_first(task, row, candidates)
            # The filters keep the candidates' order (a gang's spare members go in that order).
            victims: list[TaskInfo] | None = victims_of(task, candidates) if candidates else []
            if blocking - {victim.uid for victim in victims or ()}:
                victims = None  # a pod that refuses the task there may not be evicted
            elif not victims and nodes.fits(task, slice(row, row + 1), session.be_capacity)[0]:
                victims = None  # room there now and nobody to evict: allocate's node, not ours

            def whole(job: JobInfo, key: Hashable = selection_key) -> list[TaskInfo] | None:
                return self._whole_gang(task, job, key, also, victims_of)

            statement = None if victims is None else self._evict_until_fits(task, row, victims, enough, whole)
            if statement is not None:
                return statement
            scores[row] = preferred[row] = -np.inf
            self._sync()
            failures.at[row], failures.some = self._mark, True
        failures.nothing_at = self._mark
        return None

    def _blockers_first(self, task: TaskInfo, row: int, candidates: list[TaskInfo]) -> tuple[list[TaskInfo], set[str]]:
        """The candidates with those whose presence on the row refuses the task (pod
        anti-affinity, host ports: `Session.blocking`) first, since no other eviction makes the
        row feasible (kube-scheduler's preemption removes them whatever they free); and the uids
        of every task there that refuses it (all must be evictable for the row to take it)."""
        blocking = self.session.blocking(task, row)
        if not blocking:
            return candidates, blocking
        first = [victim for victim in candidates if victim.uid in blocking]
        return first + [victim for victim in candidates if victim.uid not in blocking], blocking

    def _sync(self) -> None:
        """Note which nodes changed since last time, and when."""
        rows, self._mark = self.session.changed_since(self._mark)
        self._last_change[rows] = self._mark

    def _changed_after(self, mark: int) -> np.ndarray:
        return np.flatnonzero(self._last_change > mark)

    def _lowest_first(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        """The reverse of the order the session would schedule them in: queue order (victims of
        several queues, in reclaim: the queue that would be served last loses first, Volcano's
        victim queue order), then job order, then task order."""
        session, jobs, queues = self.session, self.session.jobs, self.session.queues
        queue_keys: dict[str, tuple[Any, ...]] = {}

        def queue_key(name: str) -> tuple[Any, ...]:
            key = queue_keys.get(name)
            if key is None:
                queue = queues.get(name)
                key = queue_keys[name] = () if queue is None else session.queue_order_key(queue)
            return key

        return sorted(
            tasks,
            key=lambda victim: (
                queue_key(jobs[victim.job].queue),
                session.job_order_key(jobs[victim.job]),
                session.task_order_key(victim),
            ),
            reverse=True,
        )

    def _whole_gang(
        self, preemptor: TaskInfo, job: JobInfo, key: Hashable, also: Callable[[TaskInfo], bool], victims_of: Victims
    ) -> list[TaskInfo] | None:
        """Every running member of `job`, when all of them may be evicted for `preemptor` (each
        in the pool's selection, passing `also` and the victim filters), else None."""
        members = list(job.with_status(*EVICTABLE))
        if not self.allow_whole:
            return None
        if job.count(READY) - job.count((TaskStatus.SUCCEEDED,)) != len(members):
            return None  # some member is still being placed: it cannot be taken back
        if not all(self.pool.selected(key, member) and also(member) for member in members):
            return None
        if len(victims_of(preemptor, members)) != len(members):
            return None
        return members

    def _evict_until_fits(
        self,
        task: TaskInfo,
        row: int,
        victims: list[TaskInfo],
        enough: Callable[[], bool],
        whole: Callable[[JobInfo], list[TaskInfo] | None],
    ) -> Statement | None:
        """Evict `victims` in order until `task` fits on `row`. A victim whose eviction would leave
        its running gang below minMember is taken only with its whole gang (`whole`, members on
        other nodes too), and skipped when that is not allowed: whatever the plugins, no gang is
        left running short of its minimum. The preemptor's own job is exempt (its task takes the
        victim's place)."""
        session, nodes = self.session, self.session.nodes
        statement = session.statement()
        remaining = iter(victims)
        here = slice(row, row + 1)
        while True:
            if nodes.fits(task, here, session.be_capacity, future=True)[0] and enough():
                self._future.refresh(here)
                if session.predicate(task, here, self._future)[0]:
                    if statement.pipeline(task, row) is not None:  # a plugin refused it there
                        statement.discard()
                        return None
                    return statement
            victim = next(remaining, None)
            if victim is None:
                statement.discard()
                return None
            victim = session.jobs[victim.job].tasks[victim.uid]  # the session's own, maybe taken already
            if victim.status not in EVICTABLE:
                continue  # evicted with its gang already
            job = session.jobs[victim.job]
            if victim.job == task.job or job.ready_count > job.min_member:
                statement.evict(victim, self.reason, task)
                continue
            members = whole(job)
            for member in members or ():
                statement.evict(member, self.reason, task)


def commit_if_pipelined(session: Session, job: JobInfo, statements: list[Statement]) -> bool:
    """A gang's evictions and pipelines stand only if the whole gang is then pipelined."""
    if session.job_pipelined(job):
        for statement in statements:
            statement.commit()
        return True
    for statement in reversed(statements):
        statement.discard()
    return False


Attempt = Callable[[list[TaskInfo]], list[Statement]]


def in_one_domain(
    session: Session, job: JobInfo, tasks: list[TaskInfo], attempt: Attempt, max_domains: int | None = None
) -> None:
    """Run `attempt(tasks)` (it evicts and pipelines for those of the job's tasks, returning its
    statements; `make_room`) and keep what it did only if the job is then pipelined. A job a
    plugin keeps within one node group (`Session.job_domains`: a hard `networkTopology`'s
    HyperNodes) is tried in each group in turn, best first, victims and placements alike kept
    inside the group, until it is pipelined in one (Volcano's topology-aware gang eviction: a
    whole job's room is made within one HyperNode), at most `max_domains` of them."""
    domains = session.job_domains(job, evicting=True)
    if domains is None:
        commit_if_pipelined(session, job, make_room(session, job, None, tasks, attempt))
        return
    try:
        for domain in domains[:max_domains]:
            session.enter_domain(job, domain)
            if commit_if_pipelined(session, job, make_room(session, job, domain, tasks, attempt)):
                return
    finally:
        session.enter_domain(job, None)


def make_room(
    session: Session, job: JobInfo, domain: Hashable, tasks: list[TaskInfo], attempt: Attempt
) -> list[Statement]:
    """`attempt(tasks)` for a job placed as a whole. A job with sub-jobs (its PodGroup's
    `subGroupPolicy`) makes its room a sub-job at a time, in allocate's order (`turn_order`):
    each sub-job's tasks within a node group of its own inside the job's `domain`
    (`Session.sub_job_domains`, best first), the first group where the sub-job is then ready or
    pipelined kept and the others undone, until the job is pipelined; a sub-job that no group
    holds is left out (the job may still be pipelined without it). Volcano's gang eviction
    nominates a HyperNode per sub-job the same way; without it a sub-job's victims could be
    evicted across groups where the sub-job may never run whole."""
    parts = session.sub_jobs(job)
    if parts is None:
        return attempt(tasks)
    by_sub_job: dict[str, list[TaskInfo]] = {}
    for task in tasks:
        by_sub_job.setdefault(parts.of_task[task.uid], []).append(task)
    kept: list[Statement] = []
    for key in parts.turn_order(job, by_sub_job):
        sub_job = parts.sub_jobs[key]
        sub_domains = session.sub_job_domains(job, sub_job, domain, evicting=True)
        try:
            for sub_domain in [None] if sub_domains is None else sub_domains:
                session.enter_sub_domain(job, sub_job, sub_domain)
                statements = attempt(by_sub_job[key])
                if statements and (sub_job.ready(job) or sub_job.pipelined(job)):
                    kept += statements
                    break
                for statement in reversed(statements):
                    statement.discard()
        finally:
            session.enter_sub_domain(job, sub_job, None)
        if session.job_pipelined(job):
            break
    return kept


class VictimAction(Action):
    """What preempt and reclaim share: starving jobs by queue, a pool of the tasks they may evict
    and the node search; `serve` works through one queue's starving jobs (in job order)."""

    ARGUMENTS: ClassVar[Arguments] = {"maxCandidateNodes": number(minimum=1)}

    def may_lose(self, session: Session, starving: dict[str, list[JobInfo]]) -> Callable[[JobInfo], bool]:
        """Which jobs' running tasks may be victims of this action (the pool holds only those:
        building it walks their tasks)."""
        raise NotImplementedError

    def serve(self, session: Session, search: VictimSearch, queue: QueueInfo, jobs: list[JobInfo]) -> None:
        raise NotImplementedError

    def configure(self, search: VictimSearch) -> None:
        """Settings of the search an action's arguments give (none by default)."""

    def execute(self, session: Session) -> None:
        starving = starving_jobs(session)
        if not starving:
            return
        may_lose = self.may_lose(session, starving)
        pool = VictimPool(session, possible_victims(session.jobs.values(), may_lose))
        search = VictimSearch(
            session, pool, self.name, int(self.arguments.get("maxCandidateNodes", DEFAULT_MAX_CANDIDATE_NODES))
        )
        self.configure(search)
        for queue in queues_in_order(session, starving):
            self.serve(session, search, queue, starving[queue.name])


@register_action
class Preempt(VictimAction):
    name = "preempt"

    def may_lose(self, session: Session, starving: dict[str, list[JobInfo]]) -> Callable[[JobInfo], bool]:
        # Jobs of lower priority than a starving job of their queue, and the starving jobs
        # themselves (their lower-priority tasks, `_within_job`).
        highest = {name: max(job.priority for job in jobs) for name, jobs in starving.items()}
        starving_keys = {job.key for jobs in starving.values() for job in jobs}
        return lambda job: job.queue in highest and (job.priority < highest[job.queue] or job.key in starving_keys)

    def serve(self, session: Session, search: VictimSearch, queue: QueueInfo, jobs: list[JobInfo]) -> None:
        for job in jobs:
            self._between_jobs(session, search, queue, job)
        for job in jobs:
            self._within_job(session, search, queue, job)

    @staticmethod
    def _between_jobs(session: Session, search: VictimSearch, queue: QueueInfo, job: JobInfo) -> None:
        pool = search.pool

        def selection_of(task: TaskInfo) -> tuple[Hashable, Callable[[], np.ndarray]]:
            """Lower-priority tasks of the queue (BE ones only for a BE task)."""

            def selection(priority: int = job.priority, be: bool = task.best_effort) -> np.ndarray:
                return (
                    (pool.queue == pool.queue_code(queue.name))
                    & (pool.job_priority < priority)
                    & (pool.best_effort | (not be))
                )

            return ("jobs", queue.name, job.priority, task.best_effort), selection

        pending = preemptors(session, job)
        if not pending or not search.can_hold(pending, still_needed(job), selection_of):
            return

        def attempt(tasks: list[TaskInfo]) -> list[Statement]:
            statements: list[Statement] = []
            for task in tasks:
                if not session.job_starving(job):
                    break
                statement = search.place(
                    task,
                    *selection_of(task),
                    lambda victim: victim.job != job.key,
                    session.preemptable,
                    partial(session.allocatable, queue, task),
                )
                if statement is not None:
                    statements.append(statement)
            return statements

        in_one_domain(session, job, pending, attempt, search.max_domains)

    @staticmethod
    def _within_job(session: Session, search: VictimSearch, queue: QueueInfo, job: JobInfo) -> None:
        """Pending tasks take from lower-priority running tasks of their own job, each on its own
        (Volcano commits these one task at a time) until one finds nothing."""
        pool = search.pool
        code = pool.job_code(job.key)
        if code < 0:
            return
        for task in preemptors(session, job):
            best_effort = task.best_effort

            def selection(priority: int = task.priority, be: bool = best_effort) -> np.ndarray:
                return (pool.job == code) & (pool.task_priority < priority) & (pool.best_effort | (not be))

            statement = search.place(
                task,
                ("task", job.key, task.priority, best_effort),
                selection,
                anyone,
                session.preemptable,
                partial(session.allocatable, queue, task),
            )
            if statement is None:
                break
            statement.commit()


def anyone(_: TaskInfo) -> bool:
    """A victim filter that adds nothing to the pool's selection."""
    return True
