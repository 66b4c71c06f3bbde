"""proportion: share the cluster between queues by weight (Volcano's proportion plugin).

Each queue's `deserved` is found by water-filling: every round, each queue not yet satisfied
gets `remaining × weight / Σ weights`, clipped to its real capability (its `capability`, and the
cluster less everyone else's `guarantee`) and to what it asks for (allocated + pending), then
raised to its `guarantee`; a queue is satisfied once it deserves all it asks for or stops
growing, and the rounds end when nothing remains or nothing changes. A queue with `spec.deserved`
keeps that figure on the resources it names (as Volcano's capacity plugin reads it) and takes
part in the water-filling only on the others.

What a queue asks for counts the pending tasks of admitted jobs only (PodGroup not Pending, as
Volcano's jobs reach the scheduler once Inqueue; every job when `enqueue` is not configured,
since allocate then admits them itself). Pods created with their PodGroup (Spark, Ray) wait
for admission in the cache; counted as demand they would lend a queue's share to jobs it
cannot run yet and shrink other queues' deserved below what their admitted gangs need, and
those gangs, never placed, would keep holding the admission budget (a deadlock). A job the
session's `enqueue` admits counts from then on: its pending tasks join its queue's request and
the deserved shares are filled again before the next question that reads them.

Callbacks: queue order (higher `priority` first, then the smaller share = max allocated/deserved;
for `enqueue`'s turns, `admission_share`: allocated + inqueue against the deserved share of the
whole demand, the jobs waiting for admission included),
overused (allocated ≥ deserved on every resource), allocatable and preemptive (the queue is open
and allocated + request ≤ deserved on the resources the task asks for), job_enqueueable (the
queue is open and minResources + allocated + inqueue ≤ real capability), reclaimable (victims
only from queues above their deserved share, never taking a queue below its guarantee).
Pod slots take no part. The figures go to `session.queue_figures` for metrics and status.

Hierarchy (`spec.parent`): a queue's `capability` bounds its whole subtree. A task is allocatable
only while every ancestor with a capability stays within it counting everything its subtree
holds, and a PodGroup is admitted only while its minResources fits there too (Volcano's capacity
plugin's rule for capability; deserved and guarantee per level are not divided down the tree).
A parent that does not exist or a chain that loops gets a Warning event on the queue; the rest
is scheduled as usual.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from lahar.api.podgroup import PodGroupPhase
from lahar.api.resources import ResourceList
from lahar.scheduler.framework.plugin import Plugin, register_plugin
from lahar.scheduler.framework.queue_tree import queue_tree
from lahar.scheduler.framework.session import PERMIT, REJECT, Session
from lahar.scheduler.framework.shares import charged_request, charged_totals, uncharged_columns, victims_over_share
from lahar.scheduler.model import (
    CHARGED,
    PODS_COLUMN,
    JobInfo,
    QueueInfo,
    TaskInfo,
    TaskStatus,
    requested_in,
)

QUOTA_INSUFFICIENT = "queue resource quota insufficient"


def water_fill(
    total: np.ndarray,
    weights: np.ndarray,
    request: np.ndarray,
    real_capability: np.ndarray,
    guarantee: np.ndarray,
    pinned: np.ndarray,
    pinned_value: np.ndarray,
) -> np.ndarray:
    """Deserved per queue (rows) and resource (columns), as floats; see the module docstring.
    `pinned` marks the (queue, resource) cells fixed at `pinned_value`."""
    deserved = np.where(pinned, pinned_value, 0.0)
    remaining = np.maximum(total - deserved.sum(axis=0), 0.0)
    met = np.zeros(len(weights), dtype=bool)
    for _ in range(4 * len(weights) + 4):  # each round satisfies a queue or spends what remains
        active = ~met
        weight_sum = weights[active].sum()
        if not weight_sum:
            break
        old = deserved.copy()
        grown = deserved[active] + np.outer(weights[active] / weight_sum, remaining)
        grown = np.minimum(np.minimum(grown, real_capability[active]), request[active])
        grown = np.maximum(grown, guarantee[active])
        deserved[active] = np.where(pinned[active], pinned_value[active], grown)
        met[active] = (request[active] <= deserved[active]).all(axis=1) | (deserved[active] == old[active]).all(axis=1)
        change = deserved - old
        old_remaining = remaining
        remaining = np.maximum(remaining - change.sum(axis=0), 0.0)
        if not remaining.any() or np.array_equal(remaining, old_remaining):
            break
    return deserved


def _share(held: np.ndarray, inverse: np.ndarray, undeserved: np.ndarray | None) -> float:
    """max over resources of held / deserved (`inverse` = 1/deserved, 0 off the quota resources),
    and 1 when it holds some of a quota resource it deserves none of."""
    share = float((held * inverse).max())
    if undeserved is not None and share < 1.0 and held[undeserved].any():
        return 1.0
    return share


TOLERANCE = 10**7  # deserved / TOLERANCE + 1: the slack of the deserved-share check


def _add_into(sums: dict[str, np.ndarray], name: str, totals: np.ndarray) -> None:
    found = sums.get(name)
    if found is None:
        sums[name] = totals.copy()
    else:
        found += totals


@register_plugin
class ProportionPlugin(Plugin):
    name = "proportion"

    def on_session_open(self, session: Session) -> None:
        self.session = session
        queues = session.queues
        width = len(session.resources)
        self._inqueue: dict[str, np.ndarray] = {}
        # Per placement class: the quota resources it asks for, and its charge on them.
        self._asked: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # Per queue: its deserved array and the bound the check compares with (see below).
        self._limits: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for each in queues.values():
            each.allocated = np.zeros(width, dtype=np.int64)
            each.request = np.zeros(width, dtype=np.int64)
            self._inqueue[each.name] = np.zeros(width, dtype=np.int64)
        # Under oversubscription BE tasks' cpu/memory is borrowed from the agents' reclaimable
        # capacity, not from the cluster the queues share, so quotas do not charge it.
        self._uncharged = uncharged_columns(session)
        self._borrowers: set[str] = set()  # queues with pending BE tasks that borrow, not charge
        # What jobs not admitted yet ask for, per queue: only admission's turn order reads it.
        self._waiting = {name: np.zeros(width, dtype=np.int64) for name in queues}
        self._admission_inverse: dict[str, tuple[np.ndarray, np.ndarray | None]] | None = None
        admits = "enqueue" in session.conf.actions
        # What the queues' jobs hold and their admitted jobs ask for are sums of the jobs' own
        # sums (`JobInfo.totals`): add those up per queue, then charge each queue once, rather
        # than charging each of thousands of jobs.
        held: dict[str, np.ndarray] = {}
        admitted: dict[str, np.ndarray] = {}
        for job in session.jobs.values():
            queue = queues.get(job.queue)
            if queue is None:
                continue
            if job.totals is not None:
                _add_into(held, queue.name, job.totals)
            if job.phase is not PodGroupPhase.PENDING or not admits:
                if job.totals is not None:  # only admitted jobs' pending tasks (module docstring)
                    _add_into(admitted, queue.name, job.totals)
            else:  # its pods if it was created with them, else what its controller will create
                self._waiting[queue.name] += np.maximum(self._charged(job, (TaskStatus.PENDING,)), job.min_resources)
            if job.podgroup is not None:  # a lone pod has no minResources: it holds nothing back
                self._inqueue[queue.name] += job.inqueue_request
        for name, totals in held.items():
            allocated = self._charged_totals(totals, CHARGED)
            queues[name].allocated += allocated
            queues[name].request += allocated
        for name, totals in admitted.items():
            self._add_demand(queues[name], totals)
        self._deserve(session)
        self._tree(session)
        session.add_queue_order_fn(
            lambda queue: (-queue.priority, self.share(queue)),
            admission=lambda queue: (-queue.priority, self.admission_share(queue)),
        )
        session.add_overused_fn(self.overused)
        session.add_allocatable_fn(
            lambda queue, task: (
                queue.is_open and self._within_deserved(queue, task) and self._within_ancestors(queue, task)
            )
        )
        session.add_preemptive_fn(lambda queue, task: queue.is_open and self._within_deserved(queue, task))
        session.add_job_enqueueable_fn(self.job_enqueueable)
        session.add_job_enqueued_fn(self.job_enqueued)
        session.add_reclaimable_fn(self.victims)
        session.add_event_handler(self._allocate, self._deallocate)

    def _charged(self, job: JobInfo, statuses: Collection[TaskStatus]) -> np.ndarray:
        """What the job's tasks in `statuses` count against its queue (`charge` summed)."""
        if job.totals is None:
            return np.zeros(len(job.min_resources), dtype=np.int64)
        return self._charged_totals(job.totals, statuses)

    def _charged_totals(self, totals: np.ndarray, statuses: Collection[TaskStatus]) -> np.ndarray:
        """`_charged` of a `JobInfo.totals` array (one job's, or a queue's jobs' summed)."""
        return charged_totals(totals, statuses, self._uncharged)

    def _demand(self, queue: QueueInfo, job: JobInfo) -> None:
        """Add an admitted job's pending tasks to what its queue asks for."""
        if job.totals is not None:
            self._add_demand(queue, job.totals)

    def _add_demand(self, queue: QueueInfo, totals: np.ndarray) -> None:
        """Add the pending tasks of `totals` (one admitted job's, or several summed) to what the
        queue asks for; a pending BE task (a pod slot in the BE pending row) makes it a borrower."""
        pending = (TaskStatus.PENDING,)
        queue.request += self._charged_totals(totals, pending)
        if self._uncharged is not None and requested_in(totals, pending, best_effort=True)[PODS_COLUMN] > 0:
            self._borrowers.add(queue.name)

    def _water_fill(self, session: Session, requests: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(deserved, real capability) per queue (rows, in `session.queues` order) and quota
        resource (columns) for what each queue asks (`requests`, full resource vectors)."""
        queues = list(session.queues.values())
        columns = session.resources.quota_columns
        total = session.total[columns].astype(np.float64)

        def matrix(vectors: list[np.ndarray]) -> np.ndarray:
            return np.array(vectors, dtype=np.float64).reshape(len(queues), len(columns))

        guarantee = matrix([q.guarantee[columns] for q in queues])
        capability = matrix([q.capability[columns] for q in queues])
        spec = matrix([q.deserved_spec[columns] for q in queues])
        # The cluster less everyone else's guarantee, within the queue's own capability.
        real = np.maximum(total - guarantee.sum(axis=0), 0.0) + guarantee
        real = np.where(capability >= 0, np.minimum(real, capability), real)
        pinned = spec > 0
        pinned_value = np.maximum(np.minimum(spec, real), guarantee)
        request = matrix([asked[columns] for asked in requests])
        weights = np.array([q.weight for q in queues], dtype=np.float64)
        return water_fill(total, weights, request, real, guarantee, pinned, pinned_value), real

    def _inverses(self, session: Session, deserved: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        """Per queue, 1/deserved over the quota resources (0 elsewhere) and the quota resources
        it deserves none of (None when there are none): what a share is computed from."""
        columns = session.resources.quota_columns
        inverses = {}
        for i, queue in enumerate(session.queues.values()):
            inverse = np.zeros(len(session.resources))
            rounded = np.rint(deserved[i])
            inverse[columns[rounded > 0]] = 1.0 / rounded[rounded > 0]
            undeserved = columns[rounded == 0]
            inverses[queue.name] = (inverse, undeserved if len(undeserved) else None)
        return inverses

    def _deserve(self, session: Session) -> None:
        """Fill in every queue's deserved share and real capability."""
        self._stale = False
        columns = session.resources.quota_columns
        deserved, real = self._water_fill(session, [q.request for q in session.queues.values()])
        self._real_capability: dict[str, np.ndarray] = {}
        for i, queue in enumerate(session.queues.values()):
            queue.deserved = np.zeros(len(session.resources), dtype=np.int64)
            queue.deserved[columns] = np.rint(deserved[i])
            self._real_capability[queue.name] = np.rint(real[i]).astype(np.int64)
        # Shares are asked at every queue turn: keep the inverses.
        self._inverse = self._inverses(session, deserved)

    # -- the queue tree (spec.parent) -------------------------------------------------------------

    def _tree(self, session: Session) -> None:
        """Each queue's ancestors that bound it (`spec.capability` set on some resource), and what
        each such ancestor's subtree holds. A parent that does not exist, or a chain that loops,
        is reported on the queue (a Warning event) and the chain is cut there: the queue is then
        bounded by the ancestors before the fault only."""
        queues = session.queues
        tree = queue_tree(queues)
        self._ancestors: dict[str, list[str]] = {}
        self._subtree: dict[str, np.ndarray] = {}
        for queue in queues.values():
            why = tree.faults.get(queue.name)
            if why is not None and queue.queue is not None:
                session.record_event("Queue", "", queue.name, "Warning", "InvalidParent", f"queue {queue.name}: {why}")
            chain = [name for name in tree.ancestors[queue.name] if (queues[name].capability >= 0).any()]
            self._ancestors[queue.name] = chain
            for ancestor in chain:
                held = self._subtree.setdefault(ancestor, queues[ancestor].allocated.copy())
                held += queue.allocated

    def _within_ancestors(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """allocated + request ≤ capability for every bounding ancestor, on the resources it bounds."""
        request = self.charge(task)
        for name in self._ancestors.get(queue.name, ()):
            capability = self.session.queues[name].capability
            bounded = capability >= 0
            if ((self._subtree[name] + request)[bounded] > capability[bounded]).any():
                return False
        return True

    # -- figures -----------------------------------------------------------------------------

    def _fresh(self) -> None:
        """Fill the deserved shares again if a job was admitted since (its demand joined)."""
        if self._stale:
            self._deserve(self.session)

    def share(self, queue: QueueInfo) -> float:
        """max over resources of allocated / deserved (1 where it holds what it does not deserve)."""
        self._fresh()
        return _share(queue.allocated, *self._inverse[queue.name])

    def admission_share(self, queue: QueueInfo) -> float:
        """The share `enqueue` gives turns by: what the queue holds and has admitted (allocated +
        inqueue) against what it would deserve if every job waiting for admission asked too.

        The placement share cannot order admissions: a queue's deserved follows its admitted
        demand, so a queue with nothing admitted deserves what it holds (share 1, like every
        other such queue) and the tie went to the first queue by name, which then kept being
        admitted while the others waited. Demand that counts the waiting jobs gives each
        backlogged queue its weight's share, so the queue furthest below it is admitted first.
        Counting this demand only here, not in `deserved`, keeps allocation from lending a share
        to jobs that cannot run yet (module docstring)."""
        if self._admission_inverse is None:  # what waits does not change while enqueue admits
            wanted = [q.request + self._waiting[q.name] for q in self.session.queues.values()]
            deserved, _ = self._water_fill(self.session, wanted)
            self._admission_inverse = self._inverses(self.session, deserved)
        return _share(queue.allocated + self._inqueue[queue.name], *self._admission_inverse[queue.name])

    def overused(self, queue: QueueInfo) -> bool:
        if queue.name in self._borrowers:
            return False  # its BE tasks need no share; `allocatable` still stops its online tasks
        self._fresh()
        columns = self.session.resources.quota_columns
        return bool((queue.deserved[columns] <= queue.allocated[columns]).all())

    def charge(self, task: TaskInfo) -> np.ndarray:
        """What the task counts against its queue's share."""
        return charged_request(task, self._uncharged)

    def _within_deserved(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """allocated + request ≤ deserved on the quota resources the task asks for, within one
        part in ten million (+1): the water-fill works in floats, and a share of exactly half the
        cluster's memory can come out bytes short, refusing the pod that fills it (Volcano's
        comparisons have the same tolerance)."""
        self._fresh()
        found = self._asked.get(task.placement)
        if found is None:
            request = self.charge(task)
            columns = self.session.resources.quota_columns
            asked = columns[request[columns] > 0]
            found = self._asked[task.placement] = (asked, request[asked])
        asked, charged = found
        deserved = queue.deserved
        limits = self._limits.get(queue.name)
        if limits is None or limits[0] is not deserved:  # deserved is replaced, never changed in place
            limits = self._limits[queue.name] = (deserved, deserved + deserved // TOLERANCE + 1)
        return bool(np.logical_and.reduce(queue.allocated[asked] + charged <= limits[1][asked]))

    def _allocate(self, task: TaskInfo) -> None:
        queue = self.session.queue_of(task)
        if queue is not None:
            charged = self.charge(task)
            queue.allocated += charged
            for name in self._ancestors.get(queue.name, ()):
                self._subtree[name] += charged

    def _deallocate(self, task: TaskInfo) -> None:
        queue = self.session.queue_of(task)
        if queue is not None:
            charged = self.charge(task)
            queue.allocated -= charged
            for name in self._ancestors.get(queue.name, ()):
                self._subtree[name] -= charged

    # -- admission ---------------------------------------------------------------------------

    def job_enqueueable(self, job: JobInfo) -> int:
        queue = self.session.queues.get(job.queue)
        if queue is None or not queue.is_open:
            return REJECT
        if not job.min_resources.any():
            return PERMIT
        missing = [
            name
            for name, wanted, offered in zip(
                self.session.resources.names, job.min_resources, self.session.total, strict=True
            )
            if wanted > 0 and offered <= 0
        ]
        if missing:  # no quota could ever admit it: say what is missing (the gang's close reports it)
            job.set_unschedulable(
                job.min_member, f"no schedulable node offers {', '.join(missing)}, which the gang asks for"
            )
            return REJECT
        columns = self.session.resources.quota_columns
        wanted = job.min_resources + queue.allocated + self._inqueue[queue.name]
        within_ancestors = all(
            ((job.min_resources + self._subtree[name])[bounded] <= capability[bounded]).all()
            for name in self._ancestors.get(queue.name, ())
            for capability in (self.session.queues[name].capability,)
            for bounded in (capability >= 0,)
        )
        if (wanted[columns] <= self._real_capability[queue.name]).all() and within_ancestors:
            return PERMIT
        if job.podgroup is not None:
            self.session.record_event(
                "PodGroup", job.namespace, job.name, "Normal", "Unschedulable", QUOTA_INSUFFICIENT
            )
        return REJECT

    def job_enqueued(self, job: JobInfo) -> None:
        inqueue = self._inqueue.get(job.queue)
        if inqueue is not None:
            inqueue += job.min_resources
        queue = self.session.queues.get(job.queue)
        if queue is not None and job.by_status.get(TaskStatus.PENDING):
            self._demand(queue, job)  # its pods were created with it: they ask from now on
            self._stale = True

    # -- reclaim -----------------------------------------------------------------------------

    def victims(self, reclaimer: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        """Candidates from queues holding more than they deserve (on every quota resource, not
        just those the victim holds), as long as taking each one leaves its queue at or above
        its guarantee. No "holds at least the reclaimer's request" test: the node's idle
        resources make up the rest (the action evicts only until the reclaimer fits)."""
        self._fresh()
        columns = self.session.resources.quota_columns

        def over_share(queue: QueueInfo, allocated: np.ndarray, request: np.ndarray) -> bool:
            return not (allocated[columns] <= queue.deserved[columns]).all()

        return victims_over_share(candidates, self.session.queue_of, columns, over_share, uncharged=self._uncharged)

    # -- close -------------------------------------------------------------------------------

    def on_session_close(self, session: Session) -> None:
        def quota(vector: np.ndarray) -> ResourceList:
            counted = np.zeros_like(vector)
            counted[session.resources.quota_columns] = vector[session.resources.quota_columns]
            return session.resources.to_list(counted)

        figures: dict[str, dict[str, Any]] = {}
        for queue in session.queues.values():
            figures[queue.name] = {
                "share": self.share(queue),
                "deserved": quota(queue.deserved),
                "allocated": quota(queue.allocated),
                "request": quota(queue.request),
                "inqueue": quota(self._inqueue[queue.name]),
                "overused": self.overused(queue),
            }
        session.queue_figures = figures
